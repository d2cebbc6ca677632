"""The live page `upvotes serve` answers at `/`: the top posts with their exact counts, polled
from the JSON API every second, and a vote button per post that posts to /v1/votes.

The page has no inline script or style: its script (PAGE_SCRIPT, at /live-page.js) and
style (PAGE_STYLE, at /live-page.css) are served files, so its Content-Security-Policy
(PAGE_CSP) allows scripts, styles and connections from its own origin only, and no
framing. Its vote is +1 with the session cookie the page came with (sent by the browser,
never visible to the script) and the session's anti-CSRF token, which the page carries in
a meta tag and the script sends in the X-CSRF-Token header (upvotes/serving/live_sessions.py).

Post IDs are user input: the page only ever puts them into the DOM as text (textContent,
never innerHTML) and into URLs through encodeURIComponent. No external scripts or styles.
Its columns are the counters' (schemas/counters.py), whose names are code, never input.
"""
from __future__ import annotations

import json

from schemas.counters import NAMES
from upvotes.serving.live_sessions import CSRF_HEADER

POLL_MS = 1000
SCRIPT_PATH = "/live-page.js"
STYLE_PATH = "/live-page.css"
CSRF_META = "upvotes-csrf-token"
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
            "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")

_PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="__CSRF_META__" content="__CSRF_TOKEN__">
<title>upvotes: live top posts</title>
<link rel="stylesheet" href="__STYLE_PATH__">
<script src="__SCRIPT_PATH__" defer></script>
</head>
<body>
<h1>Top posts, live</h1>
<p id="status">loading&hellip;</p>
<table>
  <thead><tr><th>#</th><th>post</th>__COUNTER_HEADERS__<th></th></tr></thead>
  <tbody id="posts"></tbody>
</table>
<form id="new-vote">
  <input id="new-post-id" placeholder="any post ID" maxlength="128" required>
  <button type="submit" id="new-vote-button">upvote</button>
</form>
<p id="error"></p>
</body>
</html>
""".replace("__CSRF_META__", CSRF_META).replace("__STYLE_PATH__", STYLE_PATH).replace("__SCRIPT_PATH__", SCRIPT_PATH) \
    .replace("__COUNTER_HEADERS__", "".join(f'<th class="num">{name}</th>' for name in NAMES))

PAGE_STYLE = """body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 46rem; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: .35rem .6rem; border-bottom: 1px solid #ddd; text-align: left; }
__COUNTER_CELLS__, th.num { text-align: right; font-variant-numeric: tabular-nums; }
#status { color: #666; font-size: .9rem; margin: .6rem 0 1rem; }
#error { color: #b00; }
form { margin: 1rem 0; display: flex; gap: .5rem; flex-wrap: wrap; }
input { padding: .3rem; }
""".replace("__COUNTER_CELLS__", ", ".join(f"td.{name}" for name in NAMES))

PAGE_SCRIPT = """"use strict";
const POLL_MS = __POLL_MS__;
const COUNTERS = __COUNTERS__;
const byId = (id) => document.getElementById(id);
const CSRF_TOKEN = document.querySelector('meta[name="__CSRF_META__"]').content;

async function vote(postId) {
  // The session cookie goes along by itself (same origin); the anti-CSRF token must be sent.
  const response = await fetch("/v1/votes", {
    method: "POST", credentials: "same-origin",
    headers: {"Content-Type": "application/json", "__CSRF_HEADER__": CSRF_TOKEN},
    body: JSON.stringify({post_id: postId, counter: "upvotes", delta: 1}),
  });
  const reply = await response.json().catch(() => ({}));
  byId("error").textContent = response.status === 202 ? "" : "vote refused: " + (reply.error || response.status);
}

function render(top) {
  const body = byId("posts");
  body.replaceChildren();
  top.posts.forEach((post, index) => {
    const row = document.createElement("tr");
    row.className = "post";
    const cells = [["rank", String(index + 1)], ["post-id", post.post_id],
                   ...COUNTERS.map((name) => [name, post[name].toLocaleString("en")])];
    cells.forEach(([name, text]) => {
      const cell = document.createElement("td");
      cell.className = name;
      cell.textContent = text;
      row.appendChild(cell);
    });
    const button = document.createElement("button");
    button.className = "vote";
    button.textContent = "upvote";
    button.addEventListener("click", () => vote(post.post_id));
    const cell = document.createElement("td");
    cell.appendChild(button);
    row.appendChild(cell);
    body.appendChild(row);
  });
  byId("status").textContent = "exact counts as of " + top.as_of + "; ranking " +
    (top.exact ? "certified exact" : "not certified (a post left out may have up to " + top.bound + ")");
}

async function poll() {
  try {
    const response = await fetch("/v1/top?n=10", {cache: "no-store"});
    if (response.ok) render(await response.json());
  } catch (error) {
    byId("status").textContent = "server unreachable, retrying";
  }
  setTimeout(poll, POLL_MS);
}

byId("new-vote").addEventListener("submit", (event) => {
  event.preventDefault();
  vote(byId("new-post-id").value);
});
poll();
""".replace("__POLL_MS__", str(POLL_MS)).replace("__CSRF_META__", CSRF_META).replace("__CSRF_HEADER__", CSRF_HEADER) \
    .replace("__COUNTERS__", json.dumps(NAMES))


def page_html(csrf_token: str) -> str:
    """The page for one session. The token is URL-safe base64: nothing in it needs escaping."""
    return _PAGE_HTML.replace("__CSRF_TOKEN__", csrf_token)
