"""What a ranking is, for every surface that lists top posts: a name, what chooses it, a read that
returns a ranked page with its certification, and how the surfaces name it.

Each ranking is one module of this package implementing `Ranking`; the registry
(spanner_reads/rankings/__init__.py) lists them. The command line, the HTTP service, the live
page, CountsReader and the versioned views take everything they show from here, so none of them
names a ranking: a new one is a module and a line in the registry.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

from schemas.records import PostTotals
from spanner_reads.fresh_side import DEFAULT_EXTRA

# What every command line of a ranking ends with (Ranking.line_header), from its answer's header.
LINE_HEADER = ("by", "as_of", "exact", "bound", "folded_through")


class RankingUnavailable(RuntimeError):
    """The database cannot answer this ranking yet (the service answers 503, the command one line)."""


class RankedPost(NamedTuple):
    totals: PostTotals  # the post's exact all-time counts
    score: float  # what it is ranked by: its hot score at the snapshot, or its upvotes in the window


class RankedPage(Protocol):
    """What a ranking's read returns: the top posts with their exact counts, as of one snapshot,
    and whether the list is certified (all_time.FreshTop, trending_top.TrendingTop)."""

    @property
    def as_of(self) -> datetime: ...  # the snapshot every count was read at

    @property
    def folded_through(self) -> datetime | None: ...  # the newest finished fold's snapshot

    @property
    def exact(self) -> bool: ...  # certified: these are the top K (spanner_reads/fresh_side.py)

    @property
    def bound(self) -> float | None: ...  # no post left out scores more than this

    @property
    def considered(self) -> int: ...  # posts whose exact scores were read

    @property
    def candidate_rows(self) -> int: ...  # TopCandidates rows read

    @property
    def commits_read(self) -> int: ...  # commits whose every post was read, to certify the answer

    @property
    def ranked(self) -> list[RankedPost]: ...  # highest score first, each with its exact counts

    def to_json(self) -> dict: ...  # the answer's header, as GET /v1/top answers it


Page = TypeVar("Page", bound=RankedPage)


@dataclass(frozen=True)
class Parameter:
    """What a ranking takes besides n. It also chooses the ranking: `--NAME TEXT` on the command
    line, `NAME=TEXT` over HTTP (spanner_reads.rankings.choose)."""

    name: str  # "last": the flag and the query parameter
    keyword: str  # "hours": the read's keyword argument
    metavar: str  # "Nh|Nd"
    parse: Callable[[str], Any]  # the text to the value; ValueError with a readable reason
    help: str  # what it asks for, for --help and the API's description
    by: str  # the `by` its ranking ranks by within its window: asking for it with another is refused
    ranks: str  # what its ranking ranks by, in that refusal: "upvotes in the window"


@dataclass(frozen=True)
class Tab:
    """A ranking's tab on the live page (upvotes/serving/live_page.py)."""

    key: str  # the tab's element is tab-<key>
    label: str  # "Hot"
    query: str  # its GET /v1/top query: "by=hot&n=10"
    column: str = ""  # the score column's header; "": no score column
    status: str = (
        ""  # the status line's start, with {fields} of the answer: "hot scores (half-life {half_life_hours} h) and "
    )
    bound: str = ""  # what follows a left-out post's bound in the status line: " (hot score)"


class Ranking(ABC, Generic[Page]):
    """One ranking of posts, whose read returns a `Page`. A subclass sets the class attributes and
    implements `read`, `title` and `bound_text`; the other methods say how a command line shows
    its answer, where the defaults do not."""

    name: ClassVar[str]  # "upvotes", "hot", "last": --by and by= (or the answers' "by"), views, the cache
    help: ClassVar[str]  # what it ranks by, for --by's help and the API's description
    parameter: ClassVar[Parameter | None] = None  # what it takes besides n; None: chosen by --by
    score_field: ClassVar[str | None] = None  # each post's score in answers; None: its upvotes, a counter
    tab: ClassVar[Tab | None] = None  # its tab on the live page; None: none

    # `*args: Any, **parameters: Any`: a ranking's own read and check name the parameters it
    # takes (`hours`), and a type checker holds them to the rest of these signatures.

    @abstractmethod
    def read(
        self, database, k: int, extra: int = DEFAULT_EXTRA, staleness_s: float = 0.0, *args: Any, **parameters: Any
    ) -> Page:
        """The top `k` posts in one snapshot, strong or `staleness_s` seconds old, reading `extra`
        folded posts beyond k to replace posts that fell back."""

    def check(self, *args: Any, **parameters: Any) -> None:
        """Refuses parameters no read would take (ValueError), before a read or a cache entry."""

    def score(self, post: RankedPost) -> float:
        """A post's score as answers and lines show it."""
        return post.score

    @abstractmethod
    def title(self, page: Page) -> str:
        """What it ranks by, in words: "upvotes", "hot score (half-life 12 h)"."""

    @abstractmethod
    def bound_text(self, page: Page) -> str:
        """What a post left out may have, after "a post left out may have": "up to 1,234"."""

    def line_fields(self, page: Page, post: RankedPost) -> dict:
        """What each command line adds after the post's counts: its score and what it depends on."""
        return {}

    def line_header(self, page: Page) -> dict:
        """What each command line ends with: how the page was ranked, as of when, certified or not."""
        return {key: value for key, value in page.to_json().items() if key in LINE_HEADER}

    def score_label(self, page: Page) -> str:
        """The `--watch` table's score column; "": none."""
        return self.score_field or ""


def snapshot_of(database, staleness_s: float):
    """The one read-only snapshot a ranking is read in: strong, or `staleness_s` seconds old."""
    options = {"exact_staleness": timedelta(seconds=staleness_s)} if staleness_s > 0 else {}
    return database.snapshot(multi_use=True, **options)


def check_size(k: int, extra: int) -> None:
    if k < 1 or extra < 0:
        raise ValueError("k must be at least 1 and extra at least 0")
