"""The live page `upvotes serve` answers at `/`: the top posts with their exact counts, polled
from the JSON API every second, and a vote button per post that posts to /v1/votes.

Post IDs are user input: the page only ever puts them into the DOM as text (textContent,
never innerHTML) and into URLs through encodeURIComponent. No external scripts or styles.
"""
from __future__ import annotations

POLL_MS = 1000

PAGE_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>upvotes: live top posts</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 46rem; color: #222; }
  table { border-collapse: collapse; width: 100%; }
  th, td { padding: .35rem .6rem; border-bottom: 1px solid #ddd; text-align: left; }
  td.upvotes, td.shares, th.num { text-align: right; font-variant-numeric: tabular-nums; }
  #status { color: #666; font-size: .9rem; margin: .6rem 0 1rem; }
  #error { color: #b00; }
  form { margin: 1rem 0; display: flex; gap: .5rem; flex-wrap: wrap; }
  input { padding: .3rem; }
</style>
</head>
<body>
<h1>Top posts, live</h1>
<p id="status">loading&hellip;</p>
<table>
  <thead><tr><th>#</th><th>post</th><th class="num">upvotes</th><th class="num">shares</th><th></th></tr></thead>
  <tbody id="posts"></tbody>
</table>
<form id="new-vote">
  <input id="new-post-id" placeholder="any post ID" maxlength="128" required>
  <button type="submit" id="new-vote-button">upvote</button>
  <input id="token" type="password" placeholder="write token, if the server needs one" autocomplete="off">
</form>
<p id="error"></p>
<script>
"use strict";
const POLL_MS = __POLL_MS__;
const byId = (id) => document.getElementById(id);

async function vote(postId) {
  const headers = {"Content-Type": "application/json"};
  const token = byId("token").value;
  if (token) headers["Authorization"] = "Bearer " + token;
  const response = await fetch("/v1/votes", {
    method: "POST", headers, body: JSON.stringify({post_id: postId, counter: "upvotes", delta: 1}),
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
    const cells = [String(index + 1), post.post_id, post.upvotes.toLocaleString("en"), post.shares.toLocaleString("en")];
    ["rank", "post-id", "upvotes", "shares"].forEach((name, i) => {
      const cell = document.createElement("td");
      cell.className = name;
      cell.textContent = cells[i];
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
</script>
</body>
</html>
""".replace("__POLL_MS__", str(POLL_MS))
