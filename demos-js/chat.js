// chat.js: a chat room actor keeping its messages in an array.
// `POST /` with a JSON body `{"from": "ann", "text": "hi"}` adds a message
// (201); `GET /` answers every message as JSON; `GET /?since=N` those after
// the N-th. The array, like every object of the script, lives in the
// actor's memory and survives pause, resume, moves and forks.
// A WebSocket to `/ws` joins the room: every message (posted or sent on a
// socket as `{"from", "text"}` JSON or plain text) is sent to every socket
// as JSON; the sockets stay open while the actor is paused or moved.

import { acceptWebSocket, broadcast } from "stasis";

const messages = [];
const people = new Map(); // name -> how many messages they sent

function say(from, text) {
  const message = { n: messages.length + 1, from, text, at: Date.now() };
  messages.push(message);
  people.set(from, (people.get(from) || 0) + 1);
  broadcast(JSON.stringify(message));
}

export default {
  async fetch(request) {
    const url = new URL(request.url);
    if (request.method === "POST") {
      const { from, text } = await request.json();
      if (typeof from !== "string" || typeof text !== "string") {
        return Response.json({ error: "want {from, text} strings" }, { status: 400 });
      }
      say(from, text);
      return Response.json({ n: messages.length }, { status: 201 });
    }
    if (url.pathname === "/ws" && request.headers.get("upgrade") === "websocket") {
      return acceptWebSocket();
    }
    const since = Number(url.searchParams.get("since") || 0);
    return Response.json({
      messages: messages.slice(since),
      people: Object.fromEntries(people),
    });
  },
  socket(event) {
    if (event.type !== "message" || typeof event.data !== "string") return;
    let from = "socket", text = event.data;
    try {
      const parsed = JSON.parse(event.data);
      if (typeof parsed.from === "string" && typeof parsed.text === "string") ({ from, text } = parsed);
    } catch (_) { /* plain text */ }
    say(from, text);
  },
};
