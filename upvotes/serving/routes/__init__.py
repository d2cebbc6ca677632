"""The service's routes, one APIRouter per resource; upvotes/serving/service.py wires them into
the app, in the order they are matched:

    page.py     GET /, /live-page.js, /live-page.css: the live page and its session
    docs.py     GET /docs: the OpenAPI description's page
    health.py   GET /healthz
    votes.py    GET /v1/posts/{post_id}/votes/{user_id} and POST /v1/votes, behind the credential gate
    posts.py    GET /v1/posts/{post_id} and GET /v1/posts: exact counts
    top.py      GET /v1/top: the top posts of any ranking of the registry

Each module's `router(...)` takes what its routes use, and nothing else.
"""
