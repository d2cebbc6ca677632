"""Nobody let in: hostile post IDs stay data, SQL is never built from values, no credentials are
committed, and hostile CLI / template parameters are refused with a readable message.

- Hostile post IDs (SQL-looking, quotes, backslashes, control characters, unicode) go through
  the real sink into the Spanner emulator and come back byte for byte from exact_counts and
  verify_totals, before and after a fold: every statement is parameterised.
- A static check over the project's Python files: every SQL string and table name handed to
  the Spanner client is a literal or a module-level string constant, never an f-string,
  .format(), % or concatenation, and no f-string / format / % anywhere builds SQL text.
- A scan of every tracked and untracked (not ignored) file for private keys, Google API keys,
  service-account key files and other credentials.
- pipeline.params.parse_values refuses hostile values for every Param, naming the flag, and the
  CLI exits non-zero with one readable line and runs nothing.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import pytest
from google.cloud import spanner

import schemas
from pipeline.params import FOLD_PARAMS, STREAMING_PARAMS, InvalidParameter, parse_values
from schemas.contract import parse_vote
from schemas.counters import Counts
from schemas.records import PostDelta, PostUser, VoteEvent, VoteState
from schemas.vote_states import LatestVote
from spanner_reads.my_votes import vote_of, votes_of_user
from spanner_reads.reads import exact_counts
from spanner_store.tables import COUNTER_COLUMNS, counts_at
from spanner_writes.deltas import write_deltas
from spanner_writes.votes import apply_all_vote_states
from tests.support.fold_runs import run_fold
from upvotes.cli import main
from upvotes.devtools.verification import verify_totals

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"
HOUR = 1_795_312_800

HOSTILE_POST_IDS = [
    "'; DROP TABLE Posts; --",
    '"; DROP TABLE PostDeltas; --',
    "' OR '1'='1",
    '" OR ""="',
    "p-1' UNION SELECT PostId, Upvotes, Shares FROM Posts --",
    "1; DELETE FROM Posts WHERE TRUE",
    "@post_ids",
    "@{FORCE_INDEX=PostsByUpvotes}",
    "*/ SELECT 1 /*",
    "`Posts`",
    "\\",
    "\\'",
    '\\\\"\\n',
    "'",
    "''",
    '"',
    "\x00",
    "a\x00b",
    "\x01\x07\x08\x1b[31m\x7f",
    "line\nbreak\r\n",
    "\t",
    " ",
    "p-1 ",  # differs from "p-1" only by a trailing space
    "p-1",
    "P-1",
    "caf\u00e9",  # precomposed
    "cafe\u0301",  # decomposed: a different post, never normalised into the one above
    "\u202egnp.exe",
    "\u200f\u05e9\u05dc\u05d5\u05dd\u200e",
    "\ufeffbom",
    "\U0001f525" * 128,
    "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "%s%n{0}${jndi:ldap://x/a}",
    "<script>alert(1)</script>",
    "../../etc/passwd",
    "x" * 128,
]


def corpus_post_ids() -> list[str]:
    """The post IDs of every corpus message that is (rightly) accepted."""
    expected = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))
    ids = []
    for name, outcome in sorted(expected.items()):
        if outcome == "accepted":
            event = parse_vote((CORPUS / name).read_bytes(), {}, float(HOUR))
            assert isinstance(event, (VoteEvent, VoteState)), name
            ids.append(event.post_id)
    return ids


# --- hostile post IDs through the real sink, read back exactly --------------------------------


@pytest.fixture(scope="module")
def hostile_written(stack, database):
    """Every hostile post ID, two deltas each (two event hours), written through write_deltas."""
    ids = list(dict.fromkeys(HOSTILE_POST_IDS + corpus_post_ids()))
    assert len(ids) >= len(HOSTILE_POST_IDS)
    deltas = []
    for i, post_id in enumerate(ids):
        deltas.append(PostDelta.of(post_id, HOUR, f"sec:{i}:0", upvotes=i + 1, shares=2 * i, events=3))
        deltas.append(PostDelta.of(post_id, HOUR + 3600, f"sec:{i}:1", upvotes=7, shares=-1, events=2))
    for start in range(0, len(deltas), 40):
        write_deltas(database, deltas[start : start + 40])
    expected = {post_id: Counts(upvotes=i + 1 + 7, shares=2 * i - 1)._asdict() for i, post_id in enumerate(ids)}
    return ids, expected


def test_hostile_user_ids_keep_their_own_votes_verbatim(database) -> None:
    """The hostile strings as user IDs of vote states: each is its own voter, stored and read back
    exactly (a point read and a user's key range), none merged with another."""
    users = list(dict.fromkeys(HOSTILE_POST_IDS))
    states = {
        PostUser("hostile-users", user): LatestVote("up" if i % 2 else "down", i, f"e{i}", HOUR, 1, True)
        for i, user in enumerate(users)
    }
    apply_all_vote_states(database, states, rows_per_commit=20)
    stored = [vote_of(database, "hostile-users", user) for user in users]
    assert [None if vote is None else vote.vote for vote in stored] == [
        "up" if i % 2 else "down" for i in range(len(users))
    ]
    assert all([v.user_id for v in votes_of_user(database, user)] == [user] for user in users)
    counts = exact_counts(database, ["hostile-users"])[0].counts
    assert (counts.upvotes, counts.downvotes) == (len(users) // 2, len(users) - len(users) // 2)


def table_names(database) -> set[str]:
    with database.snapshot() as snapshot:
        return {
            r[0]
            for r in snapshot.execute_sql("SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = ''")
        }


def test_hostile_post_ids_are_stored_and_read_back_verbatim(database, hostile_written) -> None:
    ids, expected = hostile_written
    totals = exact_counts(database, ids)
    assert [t.post_id for t in totals] == ids  # same strings, same order, nothing merged or normalised
    assert {t.post_id: t.counts._asdict() for t in totals} == expected
    assert verify_totals(database, expected) == []
    # The rows themselves, by primary key: the stored PostId is the exact string, under its hash.
    keyset = spanner.KeySet(keys=[[schemas.post_hash(p), p] for p in ids])
    with database.snapshot() as snapshot:
        stored = {r[1]: r[0] for r in snapshot.read("Posts", columns=("PostHash", "PostId"), keyset=keyset)}
    assert stored == {p: schemas.post_hash(p) for p in ids}
    assert {"Posts", "PostDeltas", "PostHourlyCounts", "FoldRuns"} <= table_names(database)  # nothing dropped


def test_a_mismatch_on_a_hostile_post_id_is_reported_against_that_id(database, hostile_written) -> None:
    ids, expected = hostile_written
    drop = "'; DROP TABLE Posts; --"
    wrong = {**expected, drop: {**expected[drop], "upvotes": expected[drop]["upvotes"] + 1}}
    mismatches = verify_totals(database, wrong)
    assert [(m.post_id, m.counter, m.expected - m.actual) for m in mismatches] == [(drop, "upvotes", 1)]


def test_hostile_post_ids_survive_a_fold(stack, database, hostile_written) -> None:
    ids, expected = hostile_written
    run_fold(stack)
    keyset = spanner.KeySet(keys=[[schemas.post_hash(p), p] for p in ids])
    with database.snapshot() as snapshot:
        folded = {
            r[0]: counts_at(r, 1)._asdict()
            for r in snapshot.read("Posts", columns=("PostId",) + COUNTER_COLUMNS, keyset=keyset)
        }
    assert folded == expected  # the fold read and wrote each hostile ID as the same key
    assert verify_totals(database, expected) == []
    assert {"Posts", "PostDeltas"} <= table_names(database)


# --- static check: SQL is never built from values ----------------------------------------------

SQL_METHODS = {  # the statement is the first argument (or one of these keywords)
    "execute_sql",
    "execute_update",
    "execute_partitioned_dml",
    "execute_streaming_sql",
    "generate_query_batches",
    "partition_query",
    "run_partitioned_query",
}
BATCH_SQL_METHODS = {"batch_update"}  # a list of statements, or of (statement, params, types)
READ_METHODS = {"read", "streaming_read", "partition_read", "generate_read_batches", "run_partitioned_read"}
SQL_KEYWORDS = {"sql", "dml", "statement", "statements", "query"}
READ_KEYWORDS = {"table", "index"}
# Text that is SQL (or DDL) if an f-string / .format() / % were ever used to build it.
SQL_TEXT = re.compile(
    r"\b(SELECT\b.*\bFROM|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|"
    r"DROP\s+(TABLE|INDEX)|ALTER\s+(TABLE|INDEX)|CREATE\s+(TABLE|INDEX)|WHERE\s+\w+\s*[=<>])",
    re.S,
)
PROJECT_DIRS = ("pipeline", "transforms", "spanner_store", "upvotes", "bench", "schemas", "templates")
# Documented exceptions, as {(path relative to the repository, line): why it is safe}.
# Bench code that must name a table it chose itself would
# go here (a table name cannot be a query parameter), with the constant it comes from.
# By (file, function), not by line: a reformatted file keeps its allowances.
ALLOWED: dict[tuple[str, str], str] = {
    ("upvotes/operations/provision.py", "drop_stored_column_ddl"): "ALTER INDEX DROP STORED COLUMN, the database's own",
    (
        "upvotes/operations/provision.py",
        "add_stored_column_ddl",
    ): "ALTER INDEX ADD STORED COLUMN from posts.sql's own index",
    (
        "upvotes/operations/provision.py",
        "add_column_ddl",
    ): "ALTER TABLE ADD COLUMN from posts.sql's own column definitions",
    (
        "upvotes/operations/provision.py",
        "set_column_options_ddl",
    ): "ALTER COLUMN SET OPTIONS from posts.sql's own options",
    (
        "upvotes/operations/provision.py",
        "set_default_ddl",
    ): "ALTER TABLE ALTER COLUMN SET DEFAULT from posts.sql's own column",
    ("upvotes/operations/provision.py", "add_constraint_ddl"): "ALTER TABLE ADD CONSTRAINT from posts.sql's own CHECK",
}


def enclosing_function(source: str, line: int) -> str | None:
    """The name of the innermost function whose body holds `line`."""
    functions = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= (node.end_lineno or 0)
    ]
    return max(functions, key=lambda f: f.lineno).name if functions else None


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    what: str


# Tuples of identifiers the code declares (the counters' columns, generated from
# schemas/counters.py; never input): module-level SQL may name them (test below).
CODE_IDENTIFIERS = frozenset({"COUNTER_COLUMNS", "ADJUSTMENT_COLUMNS"})


def names_only_code_identifiers(node) -> bool:
    """An f-string whose placeholders read only CODE_IDENTIFIERS (and their comprehensions' own names)."""
    if not isinstance(node, ast.JoinedStr):
        return False
    own = {
        n.id
        for c in ast.walk(node)
        if isinstance(c, ast.comprehension)
        for n in ast.walk(c.target)
        if isinstance(n, ast.Name)
    }
    read = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return read - own <= CODE_IDENTIFIERS


def module_level_values(tree: ast.Module) -> list:
    return [
        node.value for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
    ]


def module_string_constants(tree: ast.Module) -> set[str]:
    """Names bound once, at module level, to a string literal (or a tuple of them, or an
    f-string of CODE_IDENTIFIERS) and never rebound."""

    def literal(node) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return True
        if names_only_code_identifiers(node):
            return True
        return isinstance(node, (ast.Tuple, ast.List)) and all(literal(e) for e in node.elts)

    bound: dict[str, int] = {}
    constants = set()
    for statement in tree.body:
        targets: list[ast.expr]
        value: ast.expr | None
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign):
            targets, value = [statement.target], statement.value
        else:
            continue
        for target in targets:
            if isinstance(target, ast.Name) and value is not None and literal(value):
                constants.add(target.id)
            elif (
                isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts)
            ):  # A, B = "x", ("y", "z")
                constants |= {t.id for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name) and literal(v)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound[node.id] = bound.get(node.id, 0) + 1
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                bound[name] = bound.get(name, 0) + 2  # rebinding from a function: not a constant
    return {name for name in constants if bound.get(name) == 1}


def imported_constants(tree: ast.Module, constants_of) -> set[str]:
    """Names imported with `from project.module import NAME` where NAME is a constant there."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            theirs = constants_of(node.module)
            names |= {alias.asname or alias.name for alias in node.names if alias.name in theirs}
    return names


def is_constant_text(node, constants: set[str]) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, ast.Name) and node.id in constants


def argument(call: ast.Call, keywords: set[str]):
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    for keyword in call.keywords:
        if keyword.arg in keywords:
            return keyword.value
    return None


def builds_text(node: ast.AST) -> TypeGuard[ast.expr]:
    """An f-string with placeholders, str.format(), % formatting or + concatenation of strings."""
    if isinstance(node, ast.JoinedStr):
        return any(isinstance(v, ast.FormattedValue) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return any(
            isinstance(side, (ast.Constant, ast.JoinedStr)) and isinstance(getattr(side, "value", ""), str)
            for side in (node.left, node.right)
        )
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    )


def literal_text(node) -> str:
    return " ".join(n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def call_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else None


def positional_params(function) -> list[str]:
    return [a.arg for a in function.args.posonlyargs + function.args.args]


def wrapper_argument(call: ast.Call, name: str, position: int, is_method: bool):
    """The argument a call passes for a wrapper's SQL parameter."""
    if is_method and isinstance(call.func, ast.Attribute):
        position -= 1  # self.query(SQL): `self` is not among the call's arguments
    if 0 <= position < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args[: position + 1]):
        return call.args[position]
    return next((k.value for k in call.keywords if k.arg == name), None)


def check_source(source: str, path: str, constants_of=lambda module: set()) -> tuple[list[Finding], int]:
    """(findings, number of SQL-taking calls checked) for one module's source.

    A call that passes one of its own function's parameters as the statement makes that
    function a wrapper (e.g. `def _query(snapshot, sql, **params): snapshot.execute_sql(sql, ...)`);
    its call sites in the module are then checked the same way, to a fixed point.
    """
    tree = ast.parse(source, filename=path)
    constants = module_string_constants(tree) | imported_constants(tree, constants_of)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    chain: dict[ast.AST, list] = {}  # node -> its enclosing functions, innermost first
    for function in functions:  # ast.walk is breadth-first: outer functions come before inner ones
        for node in ast.walk(function):
            if node is not function:
                chain[node] = [function] + chain.get(node, [])

    def owner(call: ast.Call, name: str):
        """The innermost enclosing function that has `name` as a parameter (closures included)."""
        return next((f for f in chain.get(call, []) if name in positional_params(f)), None)

    def statement_args(call: ast.Call, wrappers: dict) -> tuple[str, list] | None:
        """(what, statement nodes) if this call takes SQL (or a table name), else None."""
        method = call_name(call)
        if isinstance(call.func, ast.Attribute) and method in SQL_METHODS:
            return f"{method}() statement", [argument(call, SQL_KEYWORDS)]
        if isinstance(call.func, ast.Attribute) and method in BATCH_SQL_METHODS:
            statements = argument(call, SQL_KEYWORDS)
            items = statements.elts if isinstance(statements, (ast.List, ast.Tuple)) else [statements]
            return f"{method}() statement", [i.elts[0] if isinstance(i, ast.Tuple) and i.elts else i for i in items]
        if (
            isinstance(call.func, ast.Attribute)
            and method in READ_METHODS
            and any(k.arg in ("columns", "keyset") for k in call.keywords)
        ):
            return f"{method}() table", [argument(call, READ_KEYWORDS)]  # file.read() takes neither keyword
        if method in wrappers:
            return (
                f"{method}() statement (a wrapper of a Spanner call)",
                [wrapper_argument(call, name, *where) for name, where in sorted(wrappers[method].items())],
            )
        return None

    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    # {function name: {parameter passed on as SQL: (its position, whether the function is a method)}}
    wrappers: dict[str, dict[str, tuple[int, bool]]] = {}
    while True:  # find wrappers to a fixed point
        found = {name: dict(params) for name, params in wrappers.items()}
        for call in calls:
            taken = statement_args(call, found)
            if taken is None:
                continue
            for node in taken[1]:
                enclosing = owner(call, node.id) if isinstance(node, ast.Name) else None
                if enclosing is not None and node.id not in constants:
                    params = positional_params(enclosing)
                    is_method = params[0] in ("self", "cls")
                    found.setdefault(enclosing.name, {})[node.id] = (params.index(node.id), is_method)
        if found == wrappers:
            break
        wrappers = found

    findings: list[Finding] = []
    checked = 0
    declared = {id(value) for value in module_level_values(tree) if names_only_code_identifiers(value)}
    for node in ast.walk(tree):
        if builds_text(node) and SQL_TEXT.search(literal_text(node)) and id(node) not in declared:
            findings.append(Finding(path, node.lineno, "SQL text built with an f-string, format, % or +"))
    for call in calls:
        taken = statement_args(call, wrappers)
        if taken is None:
            continue
        checked += 1
        what, nodes = taken
        for node in nodes:
            if node is not None and is_constant_text(node, constants):
                continue
            enclosing = owner(call, node.id) if isinstance(node, ast.Name) else None
            if enclosing is not None and enclosing.name in wrappers and node.id in wrappers[enclosing.name]:
                continue  # a wrapper's own parameter (closures included): its call sites are checked instead
            findings.append(Finding(path, call.lineno, f"{what} is not a literal or module constant"))
    called = {call_name(c) for c in calls}
    for function in functions:
        if function.name in wrappers and function.name not in called:
            findings.append(
                Finding(
                    path,
                    function.lineno,
                    f"{function.name}() passes its parameter "
                    f"{sorted(wrappers[function.name])} as SQL, and no call site in this module shows "
                    "it is a constant",
                )
            )
    return findings, checked


def project_python_files() -> list[Path]:
    return sorted(
        p for d in PROJECT_DIRS if (REPO / d).is_dir() for p in (REPO / d).rglob("*.py") if "__pycache__" not in p.parts
    )


def test_no_sql_is_built_from_values_in_the_project() -> None:
    files = project_python_files()
    trees: dict[str, ast.Module] = {}

    def constants_of(module: str) -> set[str]:
        path = REPO / (module.replace(".", "/") + ".py")
        if not path.is_file():
            return set()
        if module not in trees:
            trees[module] = ast.parse(path.read_text(encoding="utf-8"))
        return module_string_constants(trees[module])

    findings, checked = [], 0
    for path in files:
        source = path.read_text(encoding="utf-8")
        found, count = check_source(source, str(path.relative_to(REPO)), constants_of)
        findings += [f for f in found if (f.path, enclosing_function(source, f.line)) not in ALLOWED]
        checked += count
    assert len(files) >= 15
    assert checked >= 8  # the sink, the fold and the reads all talk to Spanner: the scan saw them
    assert findings == []


BAD_SOURCE = """
TABLE = "Posts"
SQL = "SELECT 1"
def bad(snapshot, transaction):
    table, post_id = input(), input()
    snapshot.execute_sql(f"SELECT * FROM Posts WHERE PostId = '{post_id}'")  # BAD
    snapshot.execute_sql("SELECT * FROM Posts WHERE PostId = '{}'".format(post_id))  # BAD
    snapshot.execute_sql("SELECT * FROM Posts WHERE PostId = '%s'" % post_id)  # BAD
    snapshot.execute_sql("SELECT * FROM Posts WHERE PostId = '" + post_id + "'")  # BAD
    query = "SELECT * FROM " + table  # BAD
    snapshot.execute_sql(query)  # BAD
    transaction.execute_update(sql=SQL + post_id)  # BAD
    transaction.batch_update([SQL, (f"DELETE FROM {table} WHERE TRUE", {}, {})])  # BAD
    snapshot.read(table, columns=("PostId",), keyset=None)  # BAD
    snapshot.read(f"{TABLE}2", columns=("PostId",), keyset=None)  # BAD
def good(snapshot, transaction, post_id):
    snapshot.execute_sql(SQL, params={"p": post_id})
    snapshot.execute_sql("SELECT PostId FROM Posts WHERE PostId = @p", params={"p": post_id})
    transaction.batch_update([(SQL, {}, {})])
    snapshot.read(TABLE, columns=("PostId",), keyset=None)
    open("f").read()
    print(f"selected {post_id} from the list")
def _query(snapshot, sql, **params):
    return snapshot.execute_sql(sql, params=params)
def _query_twice(snapshot, statement):
    return _query(snapshot, statement), _query(snapshot, SQL)
class Reader:
    def query(self, snapshot, sql):
        return snapshot.execute_sql(sql)
def uses_wrappers(snapshot, reader):
    post_id = input()
    _query(snapshot, SQL, p=post_id)
    _query_twice(snapshot, "SELECT 2")
    reader.query(snapshot, SQL)
    _query(snapshot, f"SELECT * FROM Posts WHERE PostId = '{post_id}'")  # BAD
    _query_twice(snapshot, "SELECT " + post_id)  # BAD
    reader.query(snapshot, sql=post_id)  # BAD
def leaky(snapshot, post_id):  # BAD: passes a parameter as SQL, and no call site here shows it is constant
    return snapshot.execute_sql(post_id)
A_TABLE, A_COLUMNS = "Posts", ("PostId",)
def make_body(table, columns):
    def work(transaction):
        return transaction.read(table, columns=columns, keyset=None)
    return work
def hammer(database, table):
    return database.run_in_transaction(make_body(table, A_COLUMNS))
def closures(database, name):
    hammer(database, A_TABLE)
    make_body(A_TABLE, A_COLUMNS)
    hammer(database, name.strip())  # BAD
COUNTS_SQL = f"SELECT PostId, {', '.join(COUNTER_COLUMNS)} FROM Posts"
SUMS_SQL = f"SELECT {' + '.join(f'SUM({c})' for c in COUNTER_COLUMNS)} FROM PostDeltas"
NAMED_SQL = f"SELECT {A_TABLE} FROM Posts"  # BAD: only code-declared identifiers may be named
def declared(snapshot, post_id):
    snapshot.execute_sql(COUNTS_SQL)
    snapshot.execute_sql(SUMS_SQL)
    snapshot.execute_sql(f"SELECT {', '.join(COUNTER_COLUMNS)} FROM Posts")  # BAD: in a function, not declared
"""


def test_the_sql_check_catches_each_way_of_building_sql() -> None:
    findings, checked = check_source(BAD_SOURCE, "bad.py")
    marked = {n for n, line in enumerate(BAD_SOURCE.splitlines(), 1) if "# BAD" in line}
    assert {f.line for f in findings} == marked, findings
    assert checked == 32  # 9 in bad(), 4 in good(), 16 through or inside the wrappers, 3 in declared()
    assert "SQL" in module_string_constants(ast.parse(BAD_SOURCE))
    assert "SQL" not in module_string_constants(ast.parse(BAD_SOURCE + "\nSQL = SQL + 'x'\n"))
    assert {"COUNTS_SQL", "SUMS_SQL"} <= module_string_constants(ast.parse(BAD_SOURCE))


def test_the_code_identifiers_sql_may_name_are_identifiers() -> None:
    from spanner_store import tables

    for name in CODE_IDENTIFIERS:
        assert all(re.fullmatch(r"[A-Z][A-Za-z]*", column) for column in getattr(tables, name)), name


# --- no credentials in the repository -----------------------------------------------------------

# Written so that this file's own source matches none of them.
SECRET_PATTERNS = {
    "private key block": re.compile(rb"-----BEGIN[A-Z ]*PRIVATE KEY( BLOCK)?-----"),
    "Google API key": re.compile(rb"AIza[0-9A-Za-z_\-]{35}"),
    "Google OAuth access token": re.compile(rb"ya29\.[0-9A-Za-z_\-]{20,}"),
    "Google OAuth refresh token": re.compile(rb"1//0[0-9A-Za-z_\-]{30,}"),
    "Google OAuth client secret": re.compile(rb"GOCSPX-[0-9A-Za-z_\-]{20,}"),
    "AWS access key": re.compile(rb"(AKIA|ASIA)[0-9A-Z]{16}"),
    "GitHub token": re.compile(rb"gh[pousr]_[0-9A-Za-z]{36}"),
    "Slack token": re.compile(rb"xox[abprs]-[0-9A-Za-z\-]{10,}"),
}
JSON_KEY_MARKERS = {
    "service-account key (private_key field)": re.compile(rb'"private_key(_id)?"\s*:'),
    "service-account key (type)": re.compile(rb'"type"\s*:\s*"service_account"'),
    "OAuth client secret (client_secret field)": re.compile(rb'"client_secret"\s*:\s*"[^"]{8,}'),
    "authorized-user credentials (refresh_token field)": re.compile(rb'"refresh_token"\s*:\s*"[^"]{8,}'),
}
SECRET_FILE_NAMES = re.compile(
    r"(^|/)(id_rsa|id_dsa|id_ecdsa|id_ed25519|\.netrc|\.pgpass|\.htpasswd|credentials(\.json)?|"
    r"application_default_credentials\.json|client_secrets?\.json|[^/]*service[-_]?account[^/]*\.json|"
    r"[^/]*-key\.json|[^/]*\.(pem|p12|pfx|key|jks|keystore|ppk))$",
    re.IGNORECASE,
)
MAX_SCANNED_BYTES = 20 * 1024 * 1024


def scan_for_secrets(root: Path, relative_paths: list[str]) -> list[str]:
    findings = []
    for relative in relative_paths:
        if SECRET_FILE_NAMES.search(relative):
            findings.append(f"{relative}: a credentials file by its name")
        path = root / relative
        if not path.is_file() or path.stat().st_size > MAX_SCANNED_BYTES:
            continue
        content = path.read_bytes()
        for what, pattern in SECRET_PATTERNS.items():
            if pattern.search(content):
                findings.append(f"{relative}: {what}")
        if relative.endswith(".json"):
            findings += [f"{relative}: {what}" for what, pattern in JSON_KEY_MARKERS.items() if pattern.search(content)]
    return findings


def repository_files() -> list[str]:
    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, check=True, timeout=60).stdout
        return [p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p]

    return sorted(set(git("ls-files", "-z") + git("ls-files", "-z", "--others", "--exclude-standard")))


def test_no_credentials_are_committed_or_lying_around() -> None:
    files = repository_files()
    assert len(files) >= 40 and "setup.py" in files and "tests/test_security.py" in files
    assert not any(f.startswith(".venv/") for f in files)  # ignored files are not the repository's
    assert scan_for_secrets(REPO, files) == []


def test_the_credentials_scan_finds_planted_secrets(tmp_path: Path) -> None:
    begin, end = "-----BEGIN " + "PRIVATE KEY-----", "-----END " + "PRIVATE KEY-----"
    planted = {
        "conf/sa.json": json.dumps({"type": "service_" + "account", "private_" + "key": f"{begin}\nMIIE\n{end}\n"}),
        "notes.txt": "key=" + "AI" + "za" + "S" * 35,
        "deploy/old.pem": "not even a key, but the name says so",
        "ok.json": json.dumps({"event_id": "e1", "private": "nope"}),
    }
    for name, text in planted.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    findings = scan_for_secrets(tmp_path, sorted(planted))
    flagged = {f.split(":", 1)[0] for f in findings}
    assert flagged == {"conf/sa.json", "notes.txt", "deploy/old.pem"}, findings
    assert any("private key block" in f for f in findings) and any("Google API key" in f for f in findings)


# --- hostile CLI and template parameters ----------------------------------------------------------

HOSTILE_VALUES = [
    "x; rm -rf /",
    "$(id)",
    "`id`",
    "a && b",
    "a | b",
    "../../etc/passwd",
    "a\nb",
    "votes\n",
    "",
    " ",
    "a b",
    "x" * 300,
    "votes'--",
    "v\u03bftes",
    "a\x00b",
    "--runner=DataflowRunner",
    "-1",
    "0",
    "1e9",
    "%2e%2e%2f",
    "projects/p/subscriptions/../../x",
    "projects/my-project/subscriptions/a/b",
    "\u202e",
]
ALL_PARAMS = {p.flag: p for p in STREAMING_PARAMS + FOLD_PARAMS}


@pytest.mark.parametrize("flag", sorted(ALL_PARAMS))
def test_validate_refuses_hostile_values_naming_the_flag(flag: str) -> None:
    param = ALL_PARAMS[flag]
    params = STREAMING_PARAMS if param in STREAMING_PARAMS else FOLD_PARAMS
    good = {p.dest: p.example or p.default for p in params}
    parse_values(params, good)  # the examples pass, so each refusal below is about the one value
    for value in HOSTILE_VALUES:
        with pytest.raises(InvalidParameter) as refused:
            parse_values(params, {**good, param.dest: value})
        message = str(refused.value)
        assert f"--{param.flag}=" in message and param.template_name in message, message
        assert repr(value) in message  # shown escaped: no raw newline, NUL or RTL mark reaches a log
        assert "\n" not in message and "\x00" not in message and "\u202e" not in message
        assert f"Example: --{param.flag}=" in message


def test_the_cli_refuses_a_shell_injection_and_runs_nothing(tmp_path: Path, emulator_env) -> None:
    sentinel = tmp_path / "pwned"
    command = [
        sys.executable,
        "-m",
        "upvotes.cli",
        "stream",
        "--project=test-project",
        f"--instance=x; touch {sentinel}",
        "--database=votes",
        "--subscription=votes-sub",
        "--dead-letter-topic=votes-dl",
        "--window-seconds=2",
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, **emulator_env}
    )
    assert done.returncode != 0
    error_lines = [line for line in done.stderr.splitlines() if line.startswith("upvotes: ")]
    assert len(error_lines) == 1, done.stderr
    assert error_lines[0].startswith(
        f"upvotes: --instance='x; touch {sentinel}' is not valid (template parameter spannerInstanceId)"
    ), done.stderr
    assert "Example: --instance=" in error_lines[0]
    assert "Traceback" not in done.stderr
    assert not sentinel.exists()


@pytest.mark.parametrize(
    "argv,flag",
    [
        (["fold", "--instance", "upvotes", "--database", "$(touch /tmp/x)"], "--database="),
        (
            [
                "stream",
                "--instance",
                "upvotes",
                "--database",
                "votes",
                "--subscription",
                "s;ls",
                "--dead-letter-topic",
                "votes-dl",
            ],
            "--subscription=",
        ),
        (
            [
                "stream",
                "--instance",
                "upvotes",
                "--database",
                "votes",
                "--subscription",
                "votes-sub",
                "--dead-letter-topic",
                "votes-dl",
                "--window-seconds",
                "0",
            ],
            "--window-seconds=",
        ),
        (["fold", "--instance", "upvotes", "--database", "votes", "--posts-per-commit", "-5"], "--posts-per-commit="),
        (
            [
                "stream",
                "--instance",
                "upvotes",
                "--database",
                "votes",
                "--subscription",
                "votes-sub",
                "--dead-letter-topic",
                "../../topics/x",
            ],
            "--dead-letter-topic=",
        ),
    ],
)
def test_the_cli_names_the_bad_flag_in_one_line(argv: list[str], flag: str, capsys) -> None:
    code = main(argv[:1] + ["--project", "test-project"] + argv[1:])
    err = capsys.readouterr().err
    assert code == 1
    errors = [line for line in err.splitlines() if line.startswith("upvotes: ")]
    assert len(errors) == 1 and errors[0].startswith(f"upvotes: {flag}") and "is not valid" in errors[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["read", "verify"])
def test_hostile_ids_for_unvalidated_commands_fail_readably(command: str, tmp_path: Path, emulator_env) -> None:
    """`read` and `verify` pass --instance/--database to the Spanner client as resource names; a
    hostile one is refused by the service, reported in one line, and executes nothing."""
    sentinel = tmp_path / "pwned"
    ledger = tmp_path / "ledger.json"
    ledger.write_text(
        json.dumps({"events": 1, "invalid": 0, "posts": {"p-1": {"upvotes": 1, "shares": 0}}, "hourly": {}})
    )
    extra = ["p-1"] if command == "read" else ["--ledger", str(ledger)]
    argv = [
        sys.executable,
        "-m",
        "upvotes.cli",
        command,
        "--project",
        "test-project",
        "--instance",
        f"x; touch {sentinel}",
        "--database",
        f"d-{uuid.uuid4().hex[:6]}",
    ] + extra
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=120, cwd=REPO, env={**os.environ, **emulator_env}
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("upvotes: "), done.stderr
    assert not sentinel.exists()
