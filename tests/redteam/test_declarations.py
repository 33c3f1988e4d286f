"""The red team against what an attack declares of its parameters and what its own check returns (issue 38, items 4
and 8): hostile attacks (``tests/redteam/hostile``, package ``leakbed_hostile.declarations``), installed into an
environment of this module's own, named in ``leakbed validate`` and ``leakbed run`` as a user would.

Routes (as found on the old code), and what holding means:

- a declaration's ``$ref`` to a URL made ``leakbed validate`` fetch it (carrying out what the sandbox read), and to a
  ``file://`` path made it read one: ``hostile-decl-ref-url``, ``-ref-file``. Holds: refused in one line, exit 2;
  nothing connects to the URL; the FIFO is never opened (opening it to read would block the command).
- a catastrophic ``pattern`` hung ``validate`` and ``run``: ``hostile-decl-pattern`` (forged into the declaration),
  ``hostile-decl-regex`` (a pydantic ``pattern`` written the normal way, and a value that makes backtracking
  engines take exponential time). Holds: the forged one is refused in one line; the normal one is a bounded string
  on the trusted side, and the model's own check, in the sandbox, refuses the value in one line at once.
- huge and deep declarations, an enum of a million values, terminal escapes in a field's name: ``hostile-decl-huge``,
  ``-deep``, ``-enum``, ``-million``, ``-escape``. Holds: refused in one line (the million in the sandbox, before its
  values leave it), no escape byte on the console, and every other attack of the same package still declares.
- a check hook that saw every prior carried one prior's data into the params the other prior's lanes get:
  ``hostile-check-carry`` (a digest of its prior's labels in a string parameter), ``hostile-check-widen`` (params
  past its declared bound), ``hostile-check-look`` (reports what it can see). Holds: each prior is checked in a
  sandbox of its own that sees that prior only; params that differ between priors, or leave the declaration, are
  refused in one line.

The checks' routes are run as root and as an ordinary user (``tests/workers/ordinary.py``: as root each sandbox drops
to a uid of its own; an ordinary user's sandboxes share its uid, and what one prior's check could see of another's is
what the uid decides), in an environment of this module's own where the hostile package is written as pip leaves it
(``tests/redteam/handmade.py``), readable by that user. The declaration routes run as the user who runs pytest only:
they try to make trusted code fetch, open or evaluate what a declaration says, which no uid changes (and as root a
trusted reader could open the root-owned FIFO, where an ordinary user's could not: root is the stronger check).

Beside the runs: an AST scan shows that no trusted room imports a JSON Schema library or runs a regular expression
whose pattern is not leakbed's own literal, and the hostile declarations, checked in this process, call no regex,
open no socket and no file. ``tests/core/test_param_schema.py`` fuzzes declarations and values (hypothesis).
"""

from __future__ import annotations

import ast
import functools
import json
import os
import re
import stat
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.redteam.handmade import Env
from tests.redteam.users import WHO, entry_points, hostile_env, leakbed, out_folder, user
from tests.workers.ordinary import Ordinary

pytestmark = pytest.mark.redteam
REPO = Path(__file__).resolve().parents[2]
URL_PORT, FIFO = 47311, Path("/tmp/leakbed-hostile-ref.fifo")  # what leakbed_hostile.declarations.common names
SMALL = ["seed=7", "data.synthetic.users=6", "data.synthetic.examples_per_user=40", "data.synthetic.image_size=8",
         "fl.rounds=2", "workers.count=1", "simulation.client_cpus=2"]  # fmt: skip
ESCAPES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@pytest.fixture(scope="module")
def child() -> Iterator[Env]:
    """An environment of this module's own, readable by everyone, with the declaration routes' attacks and
    ``hostile-honest`` published."""
    wanted = entry_points(lambda name: name.startswith(("hostile-decl-", "hostile-check-", "hostile-honest")))
    with hostile_env("leakbed-redteam-declarations-", wanted) as env:
        yield env


@pytest.fixture(scope="module", params=WHO)
def who(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Ordinary | None:
    """None: this test process's user (root here); else an ordinary user."""
    return user(request.param, tmp_path_factory)


class Listener:
    """An HTTP server on the port the hostile declaration names; it records every request that reaches it."""

    def __init__(self, port: int) -> None:
        seen = self.seen = []

        class Record(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                seen.append(self.path)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        try:
            self.server = HTTPServer(("127.0.0.1", port), Record)
        except OSError as err:
            pytest.skip(f"port {port} the hostile declaration names is busy here ({err.strerror})")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener():
    found = Listener(URL_PORT)
    yield found
    found.close()


@pytest.fixture
def fifo():
    """The FIFO the hostile ``file://`` reference names, for the test's length only (a process that walks ``/tmp``
    and reads what it finds would block on it): a reader that opened it would block until a writer came."""
    if FIFO.exists() or FIFO.is_symlink():
        if not stat.S_ISFIFO(FIFO.lstat().st_mode):
            pytest.skip(f"{FIFO} exists and is not a FIFO")
        FIFO.unlink()
    os.mkfifo(FIFO, 0o600)
    yield FIFO
    FIFO.unlink(missing_ok=True)


def validate(child: Env, who: Ordinary | None, tmp: Path, suite: list[str], *sets: str,
             priors: tuple[str, ...] = ("random",)) -> tuple:  # fmt: skip
    """``leakbed validate`` in the red team's environment, as ``who``: (exit code, stdout, stderr, seconds)."""
    argv = [*SMALL, f"attack.suite={json.dumps(suite)}", f"split.priors={json.dumps(list(priors))}", *sets]
    t0 = time.monotonic()
    done = leakbed(child, who, ["validate", *(a for s in argv for a in ("--set", s))], tmp)
    seconds = time.monotonic() - t0
    print(f"\n[redteam] validate {suite} {list(sets)}: rc {done.returncode} in {seconds:.1f} s: {done.stderr.strip()[-300:]}")
    return done.returncode, done.stdout, done.stderr, seconds


def refused(rc: int, out: str, err: str) -> str:
    """The one line of a refusal (exit 2, nothing on stdout, no escape byte), without its ``leakbed: error:``."""
    assert rc == 2, (out[-2000:], err[-2000:])
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("leakbed: error: "), err[-2000:]
    assert not ESCAPES.search(lines[0]) and out == "", lines[0]
    return lines[0].removeprefix("leakbed: error: ")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("hostile-decl-ref-url", r"declares itself wrongly: params.(fields.0.)?\$ref: Extra inputs are not permitted"),
        ("hostile-decl-ref-file", r"declares itself wrongly: params.fields.0.\$ref: Extra inputs are not permitted"),
        ("hostile-decl-pattern", r"declares itself wrongly: params.fields.0.pattern: Extra inputs are not permitted"),
        ("hostile-decl-huge", r"declares itself wrongly: params.fields: Tuple should have at most 256 items"),
        ("hostile-decl-deep", r"declares itself wrongly: params: Value error, tables nest deeper than 3 levels"),
        ("hostile-decl-enum", r"declares itself wrongly: params.fields.0.choices: Tuple should have at most 256 items"),
        ("hostile-decl-escape", r"declares itself wrongly: params.(fields.0.name: Value error, a field name is a Python|"
                                r".*Extra inputs are not permitted)"),
        ("hostile-decl-million", r"params field 'value': 1000000 choices; leakbed's params language holds at most 256$"),
    ],
    ids=["hostile-decl-ref-url", "hostile-decl-ref-file", "hostile-decl-pattern", "hostile-decl-huge", "hostile-decl-deep",
         "hostile-decl-enum", "hostile-decl-escape", "hostile-decl-million"],
)
def test_a_hostile_declaration_is_refused_in_one_line_and_evaluates_nothing(child, tmp_path, listener, fifo, name, says):
    rc, out, err, seconds = validate(child, None, tmp_path, ["knn", name])
    line = refused(rc, out, err)
    assert line.startswith(f"attack.suite: attack '{name}' (leakbed_hostile.declarations.") and re.search(says, line), line
    assert listener.seen == []  # nothing fetched the URL (the old code did, from the trusted CLI)
    # the FIFO was never opened for reading: a writer now finds no reader (the old code's reader would have blocked)
    with pytest.raises(OSError) as no_reader:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert no_reader.value.errno == 6  # ENXIO
    print(f"[redteam] {name}: refused in {seconds:.1f} s")


@pytest.mark.slow
def test_leakbed_run_refuses_a_hostile_declaration_before_anything_starts(child, tmp_path, listener):
    """``leakbed run`` goes through the same preflight: the same line, exit 2, no run folder, nothing fetched."""
    out = out_folder(None, tmp_path)
    argv = [*SMALL, 'attack.suite=["knn", "hostile-decl-ref-url"]', 'split.priors=["random"]']
    done = leakbed(child, None, ["run", "--out", str(out), *(a for s in argv for a in ("--set", s))], tmp_path)
    line = refused(done.returncode, done.stdout, done.stderr)
    assert line.startswith("attack.suite: attack 'hostile-decl-ref-url' ") and "declares itself wrongly" in line, line
    assert not out.exists() and listener.seen == []


@pytest.mark.slow
def test_the_other_attacks_of_a_hostile_package_still_declare(child, tmp_path):
    """One attack's forged declaration is that attack's refusal alone: the package's honest-looking attacks load."""
    rc, out, err, _ = validate(child, None, tmp_path, ["knn", "hostile-honest"])
    assert rc == 0, err[-2000:]
    assert "[attack.params.hostile-honest]" in out or "hostile-honest" in out


@pytest.mark.slow
def test_a_catastrophic_pattern_is_the_models_own_check_in_the_sandbox(child, tmp_path):
    """``word`` declares ``^(a+)+$``: trusted code knows a string of at most 64 characters (it cannot say more), and
    the attack's own check runs the model, in a sandbox, which refuses ``a…a!`` in one line; a word that matches
    passes."""
    evil = "a" * 40 + "!"
    rc, out, err, seconds = validate(child, None, tmp_path, ["hostile-decl-regex"],
                                     f'attack.params.hostile-decl-regex.word="{evil}"')  # fmt: skip
    line = refused(rc, out, err)
    assert line == "attack.params.hostile-decl-regex.word: String should match pattern '^(a+)+$'", line
    rc, out, err, _ = validate(child, None, tmp_path, ["hostile-decl-regex"], 'attack.params.hostile-decl-regex.word="aaaa"')
    assert rc == 0 and 'word = "aaaa"' in out, err[-2000:]
    print(f"[redteam] the catastrophic pattern against {len(evil)} characters: refused in {seconds:.1f} s")


@pytest.mark.slow
def test_a_check_that_carries_its_priors_data_is_refused_when_priors_differ(child, who, tmp_path):
    """``hostile-check-carry`` writes a digest of its prior's labels into ``note``. With one prior, the digest is that
    prior's own (its lanes already hold it); with two, each prior's check sees only its own prior and returns
    its own digest: refused, so neither prior's lanes get the other's."""
    rc, out, err, _ = validate(child, who, tmp_path, ["hostile-check-carry"], priors=("random", "chrono"))
    line = refused(rc, out, err)
    assert line == ("attack.params.hostile-check-carry.note: its own check returned a different value for prior 'chrono' "
                    "than for prior 'random'; a check's parameters may not depend on the prior"), line
    rc, out, err, _ = validate(child, who, tmp_path, ["hostile-check-carry"], priors=("random",))
    assert rc == 0, err[-2000:]
    note = re.search(r'note = "([0-9a-f]*)"', out)
    assert note and len(note.group(1)) == 32, out[-2000:]


@pytest.mark.slow
def test_a_check_that_widens_its_params_is_refused_by_its_declaration(child, who, tmp_path):
    rc, out, err, _ = validate(child, who, tmp_path, ["hostile-check-widen"])
    assert refused(rc, out, err) == "attack.params.hostile-check-widen.k: 1000000 is greater than the maximum of 10"


@pytest.mark.slow
def test_a_check_sees_one_prior_only(child, who, tmp_path):
    """``hostile-check-look`` refuses with what it sees: one prior's knowledge and facts, and the request naming it."""
    rc, out, err, _ = validate(child, who, tmp_path, ["hostile-check-look"], priors=("random", "chrono"))
    line = refused(rc, out, err)
    assert line.startswith("attack.params.hostile-check-look: seen "), line
    seen = json.loads(line.removeprefix("attack.params.hostile-check-look: seen "))
    assert seen["tree"] == ["prior/knowledge.json", "prior/knowledge.npz", "prior/setting.json", "request.json"], seen
    assert seen["prior"] == "random" and seen["users"] == 6  # the first prior's refusal; the chrono call saw chrono only


# --- the trusted side, read and run in this process ---------------------------------------------------------------

TRUSTED = ("core", "client", "server", "referee", "studies", "defenses", "reference", "commands")  # + the product's own
UNTRUSTED = ("attacks", "inside")  # code that runs only in sandboxes (workers/inside, attacks)


def _trusted_files() -> list[Path]:
    root = REPO / "leakbed"
    return sorted(p for p in root.rglob("*.py") if not set(p.relative_to(root).parts) & set(UNTRUSTED))


def _literal(node: ast.AST, constants: dict[str, ast.AST], depth: int = 0) -> bool:
    """Whether ``node`` is leakbed's own text: a literal, or built only of literals and module constants that are."""
    if depth > 8:
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str | bytes)
    if isinstance(node, ast.Name):
        return node.id in constants and _literal(constants[node.id], constants, depth + 1)
    if isinstance(node, ast.JoinedStr):
        return all(_literal(v.value if isinstance(v, ast.FormattedValue) else v, constants, depth + 1) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _literal(node.left, constants, depth + 1) and _literal(node.right, constants, depth + 1)
    return False


def _constants(tree: ast.Module, depth: int = 0) -> dict[str, ast.AST]:
    """A module's top-level assignments, and the names it imports from leakbed's own modules (their assignments)."""
    found: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            found |= {t.id: node.value for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("leakbed.") and depth < 3:
            path = REPO / (node.module.replace(".", "/") + ".py")
            if path.is_file():
                theirs = _module_constants(path, depth + 1)
                found |= {a.asname or a.name: theirs[a.name] for a in node.names if a.name in theirs}
    return found


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """A leakbed module's tree, parsed once: the scan meets the same imported modules again and again (parsing them
    anew for every importer, at every depth, made the scan a minute of CPU)."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def _module_constants(path: Path, depth: int) -> dict[str, ast.AST]:
    return _constants(_parsed(path), depth)


def _offenders(tree: ast.Module, name: str) -> list[str]:
    """Where ``tree`` imports a JSON Schema library, or runs a regex or a pydantic ``pattern`` that is not a literal."""
    constants = _constants(tree)
    found = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found += [f"{where} imports {n}" for n in names if n.split(".")[0] in ("jsonschema", "fastjsonschema")]
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "re":
            if func.attr != "escape" and node.args and not _literal(node.args[0], constants):
                found.append(f"{where} re.{func.attr}({ast.unparse(node.args[0])}): a pattern that is not a literal")
        for kw in node.keywords:
            if kw.arg == "pattern" and not _literal(kw.value, constants):
                found.append(f"{where} pattern={ast.unparse(kw.value)}: a pattern that is not a literal")
    return found


@pytest.mark.long
def test_no_trusted_room_evaluates_a_plugins_schema_regex_or_reference():
    """No trusted module imports a JSON Schema library; every regular expression a trusted module compiles or runs,
    and every pydantic ``pattern``, is leakbed's own literal (or a module constant built of literals), never data."""
    caught = _offenders(ast.parse(
        "import jsonschema\nimport re\nOURS = '^a$'\ndef f(decl):\n    re.fullmatch(OURS, decl)\n"
        "    re.compile(decl['pattern'])\n    Field(pattern=decl['p'])\n"), "probe")  # the scan itself catches all three
    assert [c.split(" ", 1)[1] for c in caught] == ["imports jsonschema", "re.compile(decl['pattern']): a pattern that "
                                                    "is not a literal", "pattern=decl['p']: a pattern that is not a literal"]
    files = _trusted_files()
    assert len(files) > 100
    offenders = [o for path in files for o in _offenders(_parsed(path), str(path.relative_to(REPO)))]
    assert not offenders, "\n".join(offenders)
    # the checker and the checks hold no regex, no reference resolution, no network or file access at all
    for module in ("core/param_schema.py", "core/declaration.py", "workers/checks.py"):
        source = (REPO / "leakbed" / module).read_text()
        imported = {a.name.split(".")[0] for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & {"jsonschema", "urllib", "http", "requests", "socket"}, (module, imported)
    assert "import re" not in (REPO / "leakbed" / "core" / "param_schema.py").read_text()


FORGED = {  # what leakbed_hostile.declarations.forged writes, as the trusted side receives it
    "ref-url": {"params_schema": {"$ref": "http://127.0.0.1:9/x"}, "params": {"$ref": "http://127.0.0.1:9/x", "fields": []}},
    "ref-file": {"params": {"fields": [{"name": "k", "type": "int", "default": 1, "$ref": "file:///dev/zero"}]}},
    "pattern": {"params": {"fields": [{"name": "w", "type": "str", "default": "a", "pattern": "^(a+)+$"}]}},
    "enum": {"params": {"fields": [{"name": "v", "type": "str", "default": "v0",
                                    "choices": [f"v{i}" for i in range(1_000_000)]}]}},
}


@pytest.mark.parametrize("route", sorted(FORGED))
def test_a_hostile_declaration_checked_here_compiles_no_regex_and_reaches_no_socket_or_file(route, monkeypatch):
    """The trusted side's whole path for a declaration (its model, the params check, the catalog's rows), watched:
    no regular expression compiled from its text, no socket, no file opened."""
    from pydantic import ValidationError

    import leakbed.reference.fields as fields
    from leakbed.core.declaration import Declaration, check_params

    doc = {"name": "fake", "scoring": {"kind": "reid"}, **FORGED[route]}

    def trusted_path() -> None:
        with pytest.raises(ValidationError):
            Declaration.model_validate(doc)
        decl = Declaration.model_validate({"name": "fake", "scoring": {"kind": "reid"}, "params": {"fields": [
            {"name": "w", "type": "str", "default": "a", "max_length": 64}]}})
        check_params(decl, {"w": "a" * 40 + "!"}, "attack.params.fake")
        fields.param_rows(decl.params.fields)

    trusted_path()  # once unwatched: whatever it imports lazily is imported now
    compiled: list[str] = []
    original = re._compile  # type: ignore[attr-defined]
    monkeypatch.setattr(re, "_compile", lambda p, flags: compiled.append(str(p)) or original(p, flags))
    events: list[tuple] = []
    WATCHING.append(events)
    try:
        trusted_path()
    finally:
        WATCHING.clear()
    assert not [p for p in compiled if "(a+)+" in p or "http" in p or "file:" in p], compiled
    assert not events, events


WATCHING: list[list] = []  # the events list of the test watching now (audit hooks stay for the whole process)


def _audit(event: str, args: tuple) -> None:
    if WATCHING and event in ("socket.connect", "socket.getaddrinfo", "urllib.Request", "open", "os.listdir"):
        WATCHING[0].append((event, str(args)[:200]))


sys.addaudithook(_audit)
