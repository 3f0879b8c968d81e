// counter.js: the README's counter actor in JavaScript.
// `POST /` adds one, `GET /` reads; both answer
// `hello from: <worker> | preserved memory count: <n>`.
// The count is an ordinary module-level variable: Stasis snapshots the
// whole JavaScript heap, so it survives pause, resume, moves and restarts.
//
//   stasis template push counter-js demos-js/counter.js
//   stasis actor create my-counter-js --template counter-js
//   curl -X POST http://my-counter-js.actors.localhost:8000

let count = 0;

export default {
  fetch(request, env, ctx) {
    if (request.method === "POST") {
      count += 1;
    } else if (request.method !== "GET" && request.method !== "HEAD") {
      return new Response(`method ${request.method} not allowed; use GET or POST\n`, {
        status: 405,
      });
    }
    return new Response(`hello from: ${ctx.worker} | preserved memory count: ${count}\n`, {
      headers: { "content-type": "text/plain; charset=utf-8" },
    });
  },
};
