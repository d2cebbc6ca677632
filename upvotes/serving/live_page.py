"""The live page `upvotes serve` answers at `/`: the top posts with their exact counts, polled
from the JSON API every second, and an upvote toggle per post.

The tabs choose the list (TABS): one per ranking of the registry that declares one
(spanner_reads/rankings/: "Hot", GET /v1/top?by=hot; "Last 24 h", GET /v1/top?last=24h), what is
viral now first, then "All time" (GET /v1/top), the default ranking, which the page opens on. A tab
whose ranking scores by anything but upvotes adds a column with that score. Switching tabs polls
the new list at once; an answer for a tab no longer shown is dropped.

The page has no inline script or style: its script (PAGE_SCRIPT, at /live-page.js) and
style (PAGE_STYLE, at /live-page.css) are served files, so its Content-Security-Policy
(PAGE_CSP) allows scripts, styles and connections from its own origin only, and no
framing. It acts with the session cookie the page came with (sent by the browser, never
visible to the script) and the session's anti-CSRF token, which the page carries in a meta
tag and the script sends in the X-CSRF-Token header (upvotes/serving/live_sessions.py).

The session is one voter: its user ID comes in another meta tag. Each post's button is a
toggle between "up" and "none" for that user. The page reads the user's vote on a post once,
when the post first shows (GET /v1/posts/{post}/votes/{user}: what the stream has applied),
then keeps it itself after each click, because a click takes a window to be applied. A click
POSTs a vote-state event {"post_id", "user_id", "vote", "event_time", "event_id"} to
/v1/votes; each event's time is after the page's previous one, so the last click wins. The
"any post ID" form upvotes the same way.

Post IDs are user input: the page only ever puts them into the DOM as text (textContent,
never innerHTML) and into URLs through encodeURIComponent. No external scripts or styles.
Its columns are the counters' (schemas/counters.py), whose names are code, never input.
"""

from __future__ import annotations

import json

from schemas.counters import NAMES
from spanner_reads.rankings import DEFAULT, RANKINGS
from spanner_reads.rankings.ranking import Ranking, Tab
from upvotes.serving.live_sessions import CSRF_HEADER

POLL_MS = 1000
SCRIPT_PATH = "/live-page.js"
STYLE_PATH = "/live-page.css"
CSRF_META = "upvotes-csrf-token"
USER_META = "upvotes-user-id"

# Each tab by its key, in order: the registry's, the default ranking's last (a stable sort).
TABS: dict[str, tuple[Tab, Ranking]] = {
    ranking.tab.key: (ranking.tab, ranking)
    for ranking in sorted(RANKINGS.values(), key=lambda ranking: ranking.name == DEFAULT)
    if ranking.tab is not None
}
DEFAULT_TAB = next(key for key, (_, ranking) in TABS.items() if ranking.name == DEFAULT)
PAGE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

_PAGE_HTML = (
    """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="__CSRF_META__" content="__CSRF_TOKEN__">
<meta name="__USER_META__" content="__USER_ID__">
<title>upvotes: live top posts</title>
<link rel="stylesheet" href="__STYLE_PATH__">
<script src="__SCRIPT_PATH__" defer></script>
</head>
<body>
<h1>Top posts, live</h1>
<div id="tabs" role="tablist" aria-label="ranking">__TABS__</div>
<p id="status">loading&hellip;</p>
<table>
  <thead><tr><th>#</th><th>post</th><th id="score-header" class="num" hidden></th>__COUNTER_HEADERS__<th></th></tr></thead>
  <tbody id="posts"></tbody>
</table>
<form id="new-vote">
  <input id="new-post-id" placeholder="any post ID" maxlength="128" required>
  <button type="submit" id="new-vote-button">upvote</button>
</form>
<p id="error"></p>
</body>
</html>
""".replace("__CSRF_META__", CSRF_META)
    .replace("__USER_META__", USER_META)
    .replace("__STYLE_PATH__", STYLE_PATH)
    .replace("__SCRIPT_PATH__", SCRIPT_PATH)
    .replace("__COUNTER_HEADERS__", "".join(f'<th class="num">{name}</th>' for name in NAMES))
    .replace(
        "__TABS__",
        "".join(
            f'<button type="button" role="tab" id="tab-{kind}" data-ranking="{kind}" '
            f'aria-selected="{str(kind == DEFAULT_TAB).lower()}">{tab.label}</button>'
            for kind, (tab, _) in TABS.items()
        ),
    )
)

PAGE_STYLE = """body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 46rem; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { padding: .35rem .6rem; border-bottom: 1px solid #ddd; text-align: left; }
__COUNTER_CELLS__, th.num { text-align: right; font-variant-numeric: tabular-nums; }
#status { color: #666; font-size: .9rem; margin: .6rem 0 1rem; }
#error { color: #b00; }
form { margin: 1rem 0; display: flex; gap: .5rem; flex-wrap: wrap; }
input { padding: .3rem; }
button.vote { min-width: 6rem; }
button.vote[aria-pressed="true"] { font-weight: bold; }
#tabs { display: flex; gap: .25rem; border-bottom: 1px solid #ddd; }
#tabs button { border: 0; border-bottom: 3px solid transparent; background: none; padding: .4rem .8rem; cursor: pointer; }
#tabs button[aria-selected="true"] { border-bottom-color: #222; font-weight: bold; }
""".replace("__COUNTER_CELLS__", ", ".join(f"td.{name}" for name in (*NAMES, "score")))

PAGE_SCRIPT = (
    """"use strict";
const POLL_MS = __POLL_MS__;
const COUNTERS = __COUNTERS__;
const RANKINGS = __RANKINGS__;
let ranking = "__DEFAULT_RANKING__";  // the tab shown
let polls = 0;  // polls started: an answer to an older one (another tab) is dropped
let pollTimer = null;
const byId = (id) => document.getElementById(id);
const metaContent = (name) => document.querySelector('meta[name="' + name + '"]').content;
const CSRF_TOKEN = metaContent("__CSRF_META__");
const USER_ID = metaContent("__USER_META__");
// This session's vote on each post it has seen: "up" or "none". Read once per post, then kept
// here: a click is applied a window later, so reading it back would show the old vote a while.
const myVotes = new Map();
const asked = new Set();  // posts whose vote was read or is being read
const busy = new Set();  // posts with a read or a vote in flight: their toggle waits
let shownToggles = new Map();  // post ID -> its toggle in the table as last drawn
let lastEventMs = 0;

function paint(toggle, postId) {
  const upvoted = myVotes.get(postId) === "up";
  toggle.disabled = busy.has(postId) || !myVotes.has(postId);
  toggle.textContent = toggle.disabled ? "\u2026" : upvoted ? "upvoted" : "upvote";
  toggle.title = upvoted ? "take your upvote back" : "upvote";
  toggle.setAttribute("aria-pressed", String(upvoted));
}

function repaint(postId) {
  const toggle = shownToggles.get(postId);
  if (toggle) paint(toggle, postId);
}

function randomId() {
  // crypto.randomUUID needs a secure context; a page served over plain http by name is not one.
  return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
}

async function readMyVote(postId) {
  asked.add(postId);
  busy.add(postId);
  try {
    const response = await fetch("/v1/posts/" + encodeURIComponent(postId) + "/votes/" + encodeURIComponent(USER_ID), {
      cache: "no-store", credentials: "same-origin", headers: {"__CSRF_HEADER__": CSRF_TOKEN},
    });
    const reply = await response.json().catch(() => ({}));
    if (response.ok) {
      if (!myVotes.has(postId)) myVotes.set(postId, reply.vote === "up" ? "up" : "none");
    } else {
      asked.delete(postId);  // asked again at the next poll
      byId("error").textContent = "your vote could not be read: " + (reply.error || response.status);
    }
  } catch (error) {
    asked.delete(postId);
  } finally {
    busy.delete(postId);
    repaint(postId);
  }
}

async function sendVote(postId, vote) {
  // Whether the vote was accepted. The session cookie goes along by itself (same origin); the
  // anti-CSRF token must be sent.
  lastEventMs = Math.max(Date.now(), lastEventMs + 1);  // later than this page's previous vote
  const event = {post_id: postId, user_id: USER_ID, vote: vote, event_time: new Date(lastEventMs).toISOString(),
                 event_id: randomId()};
  busy.add(postId);
  repaint(postId);
  try {
    const response = await fetch("/v1/votes", {
      method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "__CSRF_HEADER__": CSRF_TOKEN},
      body: JSON.stringify(event),
    });
    const reply = await response.json().catch(() => ({}));
    if (response.status === 202) {
      myVotes.set(postId, vote);
      asked.add(postId);
      byId("error").textContent = "";
      return true;
    }
    const reason = (reply.rejected && reply.rejected.length) ? reply.rejected[0].error : reply.error;
    byId("error").textContent = "vote refused: " + (reason || response.status);
  } catch (error) {
    byId("error").textContent = "vote not sent: server unreachable";
  } finally {
    busy.delete(postId);
    repaint(postId);
  }
  return false;
}

function scoreText(value) {
  return Number(value).toLocaleString("en", {maximumFractionDigits: 2});
}

function render(top, kind) {
  const body = byId("posts");
  const score = RANKINGS[kind].score;
  body.replaceChildren();
  shownToggles = new Map();
  top.posts.forEach((post, index) => {
    const row = document.createElement("tr");
    row.className = "post";
    const cells = [["rank", String(index + 1)], ["post-id", post.post_id],
                   ...(score ? [["score", scoreText(post[score])]] : []),
                   ...COUNTERS.map((name) => [name, post[name].toLocaleString("en")])];
    cells.forEach(([name, text]) => {
      const cell = document.createElement("td");
      cell.className = name;
      cell.textContent = text;
      row.appendChild(cell);
    });
    const toggle = document.createElement("button");
    toggle.className = "vote";
    toggle.addEventListener("click", () => sendVote(post.post_id, myVotes.get(post.post_id) === "up" ? "none" : "up"));
    shownToggles.set(post.post_id, toggle);
    paint(toggle, post.post_id);
    const cell = document.createElement("td");
    cell.appendChild(toggle);
    row.appendChild(cell);
    body.appendChild(row);
    if (!asked.has(post.post_id)) readMyVote(post.post_id);
  });
  const what = RANKINGS[kind].what.replace(/\\{(\\w+)\\}/g, (_, field) => String(top[field]));
  const bound = score ? scoreText(top.bound) + RANKINGS[kind].bound : top.bound;
  byId("status").textContent = what + "exact counts as of " + top.as_of + "; ranking " +
    (top.exact ? "certified exact" : "not certified (a post left out may have up to " + bound + ")");
}

async function poll() {
  clearTimeout(pollTimer);
  const kind = ranking;
  const mine = ++polls;
  try {
    const response = await fetch(RANKINGS[kind].url, {cache: "no-store"});
    const reply = await response.json().catch(() => ({}));
    if (mine !== polls) return;  // another tab was chosen meanwhile: its poll draws the table
    if (response.ok) render(reply, kind);
    // A list already drawn stays until the next poll; an empty one says why (e.g. no hot ranking yet).
    else if (!byId("posts").children.length) {
      byId("status").textContent = "the list could not be read: " + (reply.error || response.status);
    }
  } catch (error) {
    if (mine !== polls) return;
    byId("status").textContent = "server unreachable, retrying";
  }
  pollTimer = setTimeout(poll, POLL_MS);
}

function choose(kind) {
  ranking = kind;
  document.querySelectorAll("#tabs [role=tab]").forEach(
    (tab) => tab.setAttribute("aria-selected", String(tab.dataset.ranking === kind)));
  const header = byId("score-header");
  header.hidden = !RANKINGS[kind].score;
  header.textContent = RANKINGS[kind].column;
  byId("posts").replaceChildren();
  shownToggles = new Map();
  byId("status").textContent = "loading\u2026";
  poll();
}

document.querySelectorAll("#tabs [role=tab]").forEach(
  (tab) => tab.addEventListener("click", () => choose(tab.dataset.ranking)));

byId("new-vote").addEventListener("submit", async (event) => {
  event.preventDefault();
  if (await sendVote(byId("new-post-id").value, "up")) byId("new-post-id").value = "";
});
poll();
""".replace("__POLL_MS__", str(POLL_MS))
    .replace("__CSRF_META__", CSRF_META)
    .replace("__USER_META__", USER_META)
    .replace("__CSRF_HEADER__", CSRF_HEADER)
    .replace("__COUNTERS__", json.dumps(NAMES))
    .replace(
        "__RANKINGS__",
        json.dumps(
            {
                kind: {
                    "url": f"/v1/top?{tab.query}",
                    "score": ranking.score_field,
                    "column": tab.column,
                    "what": tab.status,
                    "bound": tab.bound,
                }
                for kind, (tab, ranking) in TABS.items()
            }
        ),
    )
    .replace("__DEFAULT_RANKING__", DEFAULT_TAB)
)


def page_html(csrf_token: str, user_id: str) -> str:
    """The page for one session: its anti-CSRF token and the user it votes as. Both are
    URL-safe base64 (live_sessions.py): nothing in them needs escaping."""
    return _PAGE_HTML.replace("__CSRF_TOKEN__", csrf_token).replace("__USER_ID__", user_id)
