// chat.js: a chat room actor keeping its messages in an array.
// `POST /` with a JSON body `{"from": "ann", "text": "hi"}` adds a message
// (201); `GET /` answers every message as JSON; `GET /?since=N` those after
// the N-th. The array, like every object of the script, lives in the
// actor's memory and survives pause, resume, moves and forks.

const messages = [];
const people = new Map(); // name -> how many messages they sent

export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (request.method === "POST") {
      const { from, text } = await request.json();
      if (typeof from !== "string" || typeof text !== "string") {
        return Response.json({ error: "want {from, text} strings" }, { status: 400 });
      }
      messages.push({ n: messages.length + 1, from, text, at: Date.now() });
      people.set(from, (people.get(from) || 0) + 1);
      return Response.json({ n: messages.length }, { status: 201 });
    }
    const since = Number(url.searchParams.get("since") || 0);
    return Response.json({
      messages: messages.slice(since),
      people: Object.fromEntries(people),
    });
  },
};
