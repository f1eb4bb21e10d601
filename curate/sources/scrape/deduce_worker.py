"""Runs in a sandboxed worker (curate.isolation): the scraped code is untrusted.

`deduce`: load a closure, find constructor arguments (defaults, names, then a search driven by
the errors) and forward inputs (small tensors repaired from the exception messages: rank,
channels, features, dtype, unpacking; restarts in other ranks), a bounded number of attempts,
never the same state twice. `check`: run a finished KernelBench program as it will be run
later: deterministic under a seed, output depending on the input, doing some compute.
"""

from __future__ import annotations

import inspect
import re
import socket
import sys
import time
import traceback
import types
import urllib.error

from . import repair
from .mocks import CONFIG_PARAMS, UNAVAILABLE_SOURCE, namespace

PROGRAM = "<scraped>"


class NeedsDownload(Exception):
    """The module asked for weights or files from the network."""


class MissingExtension(ImportError):
    """A compiled extension the module calls does not load here (torchvision's C ops built for
    another torch): no argument or input cures it."""


# how a compiled extension that did not load shows itself when it is called
EXTENSION = re.compile(r"Couldn't load custom C\+\+ ops|operator \w+::\w+ does not exist|"
                       r"undefined symbol|cannot open shared object file")


def _incurable(exc: BaseException) -> None:
    """Raise, as an import failure, an error that the search cannot repair."""
    if not isinstance(exc, ImportError) and EXTENSION.search(str(exc)):
        raise MissingExtension(f"{type(exc).__name__}: {exc}") from exc


def _no_download(*args, **kwargs):
    raise NeedsDownload(f"download attempted: {args[:1]!r}")


def setup() -> None:
    """Once per worker: torch imported, downloads refused before any scraped code runs."""
    import torch
    import torch.hub
    import urllib.request
    torch.set_num_threads(1)
    for mod, names in ((torch.hub, ("load_state_dict_from_url", "download_url_to_file", "load")),
                       (urllib.request, ("urlopen", "urlretrieve"))):
        for n in names:
            setattr(mod, n, _no_download)
    try:
        import torch.utils.model_zoo as zoo
        zoo.load_url = _no_download
    except ImportError:
        pass


def handle(task: dict) -> dict:
    t0 = time.monotonic()
    try:
        out = check(task) if task.get("role") == "check" else deduce(task)
    except BaseException as exc:  # noqa: BLE001 - the module's failure is the answer
        if isinstance(exc, KeyboardInterrupt):
            raise
        out = {"ok": False, "reason": classify(exc, task), "error": _error_text(exc)}
    out["seconds"] = round(time.monotonic() - t0, 3)
    return out  # the pool is `fresh`: this process serves no other task


def load(program: str) -> dict:
    mod = types.ModuleType("scraped")
    mod.__file__ = "scraped.py"
    mod.__dict__.update(namespace())
    sys.modules["scraped"] = mod
    exec(compile(program, PROGRAM, "exec"), mod.__dict__)  # noqa: S102 - sandboxed worker
    return mod.__dict__


def load_standing_in(program: str, tries: int = 8) -> tuple[dict, str]:
    """(namespace, program as loaded): an outside import that fails while the program loads
    becomes a stand-in that raises ImportError only when it is used, so that a class that
    never uses it still runs alone."""
    for _ in range(tries):
        try:
            return load(program), program
        except Exception as exc:  # noqa: BLE001 - an import line may be what failed
            new = _stand_in(program, exc)
            if new is None:
                raise
            program = new
    return load(program), program


def _stand_in(program: str, exc: BaseException) -> str | None:
    """The program with the top-level import that raised `exc` replaced, or None."""
    import ast
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == PROGRAM]
    if not frames or frames[-1].lineno is None or frames[-1].name != "<module>":
        return None
    lines = program.split("\n")
    at = frames[-1].lineno - 1
    line = lines[at] if at < len(lines) else ""
    indent = line[:len(line) - len(line.lstrip())]
    try:
        node = ast.parse(line.strip()).body[0]
    except (SyntaxError, IndexError):
        return None
    if not isinstance(node, (ast.Import, ast.ImportFrom)) or len(node.names) != 1 or \
            node.names[0].name == "*":
        return None
    alias = node.names[0]
    if isinstance(node, ast.Import):
        full, bound = alias.name, alias.asname or alias.name.split(".")[0]
    else:
        full, bound = f"{node.module}.{alias.name}", alias.asname or alias.name
    why = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    lines[at] = f"{indent}{bound} = _unavailable({full!r}, {why!r})"
    if "class _UnavailableType" not in program:  # after the first line, `import torch`
        lines[1:1] = ["", UNAVAILABLE_SOURCE.strip(), ""]
    return "\n".join(lines)


def classify(exc: BaseException, task: dict) -> str:
    """The reason for an exception that ends the attempt outright."""
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (NeedsDownload, urllib.error.URLError, ConnectionError, socket.gaierror,
                        FileNotFoundError, socket.timeout)):
        return "needs_weights"
    if isinstance(exc, MemoryError) or "can't allocate memory" in text or \
            "not enough memory" in text:
        return "too_large"
    if isinstance(exc, ImportError) or EXTENSION.search(text):
        return "import_error"
    if isinstance(exc, NameError) and task.get("missing"):
        return "missing_dependency"
    return "gave_up"


def _error_text(exc: BaseException) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__, limit=-4)
    return "".join(tb)[-2000:]


# -- constructor ---------------------------------------------------------------------------

def _init_params(cls) -> tuple[list[inspect.Parameter], list[inspect.Parameter]]:
    try:
        params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    except (TypeError, ValueError):
        return [], []
    pos = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
           and p.default is p.empty]
    kw = [p for p in params if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    return pos, kw


# layer factories a constructor calls (`norm_layer(channels)`, `activation_layer(inplace=True)`):
# by what the name says, then nn.Identity, which takes any arguments
CALLABLES = (("norm", "torch.nn.BatchNorm2d"), ("bn", "torch.nn.BatchNorm2d"),
             ("act", "torch.nn.ReLU"), ("nonlin", "torch.nn.ReLU"), ("", "torch.nn.Identity"))
FACTORY_WORDS = ("_layer", "_fn", "_builder", "_constructor", "_cls", "_factory", "block")


def _annotation_kind(ann) -> type | None:
    """bool, float, str, list or callable for an annotation, typing's generics included."""
    import collections.abc
    import typing
    if isinstance(ann, str):  # postponed annotations: read the text
        return _annotation_text_kind(ann)
    if isinstance(ann, type) and ann in (bool, float, str, tuple, list):
        return list if ann is tuple else ann
    origin = typing.get_origin(ann)
    if origin is typing.Union:  # Optional[X]: X
        kinds = {_annotation_kind(a) for a in typing.get_args(ann) if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if origin in (list, tuple, collections.abc.Sequence):
        return list
    if origin is collections.abc.Callable or ann is typing.Callable:
        return collections.abc.Callable
    return None


def _annotation_text_kind(text: str) -> type | None:
    import collections.abc
    t = re.sub(r"\b(?:typing|collections\.abc|t)\.", "", text.replace(" ", ""))
    t = re.sub(r"^Optional\[(.*)\]$|^(.*)\|None$|^None\|(.*)$",
               lambda m: next(g for g in m.groups() if g), t)
    head = t.split("[")[0]
    kinds = {"bool": bool, "float": float, "str": str, "list": list, "List": list, "tuple": list,
             "Tuple": list, "Sequence": list, "Callable": collections.abc.Callable}
    return kinds.get(head)


def _callables(name: str) -> list[str]:
    return list(dict.fromkeys(f for word, f in CALLABLES if word in name))


def _choices(p: inspect.Parameter, guess) -> list:
    """Values to try for a constructor parameter, most likely first (as source text)."""
    import collections.abc
    name = p.name.lower()
    kind = _annotation_kind(p.annotation)
    first = []
    if name in CONFIG_PARAMS or any(w in name for w in ("config", "cfg", "cnf", "setting")):
        first.append(f"_Mock({p.name!r})")
    if kind is bool:
        first += ["False", "True"]
    elif kind is float:
        first += ["0.5", "1.0"]
    elif kind is str:
        first += ["'relu'", "'mean'"]
    elif kind is list:
        first += ["[4, 4]", "(4, 4)"]
    elif kind is collections.abc.Callable or name.endswith(FACTORY_WORDS):
        first += _callables(name)
    first.append(repr(guess(p.name)))
    rest = ["4", "1", "2", "8", "3", "16", "0.5", "True", "False", "(4, 4)", "[4, 4]", "'relu'",
            "None", "32", "64", f"_Mock({p.name!r})", "[4, 4, 4, 4]", "0", *_callables(name)]
    return list(dict.fromkeys(first + rest))


# what an error says about the value it wanted: (message pattern, test on an option's text)
WANTS = [
    (re.compile(r"not iterable|not subscriptable|has no len|cannot unpack non-iterable|"
                r"should not be empty|must be a (?:list|tuple|sequence)"),
     lambda t: t.startswith(("[", "("))),
    (re.compile(r"'(?:int|float|bool|NoneType|tuple|list|str)' object has no attribute"),
     lambda t: t.startswith("_Mock(")),
    (re.compile(r"must be int, not float|'float' object cannot be interpreted as an integer|"
                r"expected int|integer argument expected"), lambda t: t.isdigit()),
    (re.compile(r"object is not callable"), lambda t: t.startswith("torch.nn.")),
    (re.compile(r"NoneType"), lambda t: t != "None"),
    (re.compile(r"must be (?:a )?str|expected str"), lambda t: t.startswith("'")),
]


def _wanted(message: str):
    for pattern, test in WANTS:
        if pattern.search(message):
            return test
    return None


def _named_first(params: list[inspect.Parameter], exc: BaseException) -> list[int]:
    """Parameter indices, those the message names first, then those the failing lines name
    (the innermost line first), then the rest."""
    lines = [f.line or "" for f in traceback.extract_tb(exc.__traceback__)
             if f.filename == PROGRAM]
    order: list[int] = []
    for text in [str(exc), *reversed(lines)]:
        words = set(re.findall(r"\w+", text))
        order += [i for i, p in enumerate(params) if p.name in words and i not in order]
    return order + [i for i in range(len(params)) if i not in order]


class InitSearch:
    """Constructor arguments: defaults kept, required ones guessed from their names, then moved
    one at a time to other values as the errors point at them; never the same state twice."""

    MISSING = re.compile(r"missing \d+ required (?:positional|keyword-only) arguments?: (.*)")

    def __init__(self, ns: dict, cls, task: dict):
        self.ns, self.cls, self.task = ns, cls, task
        self.pos, self.kw = _init_params(cls)
        self.options = [_choices(p, ns["_guess"]) for p in self.pos + self.kw]
        self.state: tuple | None = tuple(0 for _ in self.options)
        self.seen: set = set()
        self.attempts, self.last = 0, None

    def next_model(self, budget_s: float):
        """The next model that constructs, or raises the last error."""
        deadline = time.monotonic() + budget_s
        while self.state is not None and self.attempts < self.task.get("max_init", 30) \
                and time.monotonic() < deadline:
            state, self.state = self.state, None
            self.seen.add(state)
            self.attempts += 1
            texts = [self.options[i][j] for i, j in enumerate(state)]
            try:
                model, texts = self._build(texts)
                self.current = state
                return model, texts
            except (NeedsDownload, MemoryError, ImportError, FileNotFoundError,
                    urllib.error.URLError):
                raise
            except Exception as exc:  # noqa: BLE001 - try the next arguments
                _incurable(exc)
                self.last = exc
                self.state = self._grow(exc) or self.advance(state, exc)
        raise self.last if self.last is not None else RuntimeError("no constructor arguments")

    def _build(self, texts: list[str]):
        import torch
        n = len(self.pos)
        args = [eval(t, self.ns) for t in texts[:n]]  # noqa: S307 - our own literals
        kwargs = {p.name: eval(t, self.ns) for p, t in zip(self.kw, texts[n:])}  # noqa: S307
        torch.manual_seed(0)
        model = self.cls(*args, **kwargs)
        # a config mock now holds what the constructor asked of it: say so in the program
        texts = [repr(v) if type(v).__name__ == "_Mock" else t
                 for v, t in zip([*args, *kwargs.values()], texts)]
        return model, texts

    def _grow(self, exc) -> tuple | None:
        """`__init__(*args, **kwargs)` passing on to a base that names what it misses."""
        m = self.MISSING.search(str(exc))
        if not m or not isinstance(exc, TypeError):
            return None
        names = [n for n in re.findall(r"'(\w+)'", m.group(1))
                 if n not in {p.name for p in self.pos + self.kw}]
        if not names:
            return None
        # a constructor taking **kwargs passes them on by name
        keyword = "keyword-only" in m.group(0) or self._takes_kwargs()
        new = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY if keyword else
                                 inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
        if keyword:
            self.kw += new
        else:
            self.pos += new
        self.options = [_choices(p, self.ns["_guess"]) for p in self.pos + self.kw]
        self.seen = set()
        return tuple(0 for _ in self.options)

    def _takes_kwargs(self) -> bool:
        try:
            params = inspect.signature(self.cls.__init__).parameters.values()
        except (TypeError, ValueError):
            return False
        return any(p.kind == p.VAR_KEYWORD for p in params)

    def advance(self, state, exc) -> tuple | None:
        """Move the parameter the error names (or its failing line mentions) on."""
        params = self.pos + self.kw
        order = _named_first(params, exc)
        wanted = _wanted(str(exc))
        for i in order if wanted else []:  # jump to the kind of value the error asks for
            if wanted(self.options[i][state[i]]):
                continue  # already of that kind: the error is about another one
            for j, opt in enumerate(self.options[i]):
                new = state[:i] + (j,) + state[i + 1:]
                if j != state[i] and wanted(opt) and new not in self.seen:
                    return new
        for i in order:
            for j in range(state[i] + 1, len(self.options[i])):
                new = state[:i] + (j,) + state[i + 1:]
                if new not in self.seen:
                    return new
        return None


# -- forward -------------------------------------------------------------------------------

def forward_arity(model) -> tuple[list[str], bool] | str:
    """(names of the required positional inputs, takes *args) or a reason."""
    import torch
    if type(model).forward is torch.nn.Module.forward:
        return "no_forward"
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return "no_forward"
    if any(p.kind == p.KEYWORD_ONLY and p.default is p.empty for p in params):
        return "forward_kwargs"
    pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
           and p.default is p.empty]
    star = any(p.kind == p.VAR_POSITIONAL for p in params)
    if not pos and not star and any(p.kind == p.VAR_KEYWORD for p in params):
        return "forward_kwargs"
    return pos, star


def find_inputs(model, names: list[str], task: dict, budget_s: float):
    """(inputs source text, attempts) or raises the last error."""
    import torch
    stack = list(reversed(repair.restarts(names)))
    seen, last, attempts, identity = set(), None, 0, None
    deadline = time.monotonic() + budget_s
    while stack and attempts < task.get("max_forward", 40) and time.monotonic() < deadline:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        if repair.numel(state) > task.get("max_input_numel", 1 << 24):
            continue
        attempts += 1
        text = repair.render(state)
        try:
            torch.manual_seed(1)
            inputs = eval(text, {"torch": torch})  # noqa: S307 - our own text
            with torch.no_grad():
                out = model(*inputs)
            if not _returns_input(out, inputs):
                return text, attempts
            # a resize or crop to the size it was given: larger inputs, or this one after all
            identity = identity or (text, attempts)
            stack = [s for s in repair.larger(state) if s not in seen]
            continue
        except (NeedsDownload, MemoryError, ImportError, FileNotFoundError, urllib.error.URLError,
                NotImplementedError):
            raise
        except Exception as exc:  # noqa: BLE001 - repair the inputs from the message
            _incurable(exc)
            last = exc
            for new in reversed(repair.repairs(state, f"{type(exc).__name__}: {exc}")):
                if new not in seen:
                    stack.append(new)
    if identity is not None:
        return identity  # the check says no_compute
    if last is None:
        raise RuntimeError("no input shapes left to try")
    raise last


def _inference(model):
    """Eval mode, as verify and synth run every program (verify.worker.models.build_model): no
    dropout, batch norm on running statistics. Judged in training mode, a model with dropout
    was nondeterministic here and deterministic everywhere it is used."""
    return model.eval() if hasattr(model, "eval") else model


def _count_params(model) -> int:
    import torch
    lazy = torch.nn.parameter.UninitializedParameter
    return sum(p.numel() for p in model.parameters() if not isinstance(p, lazy))


def deduce(task: dict) -> dict:
    """Constructor arguments, then inputs; a forward that no input fits moves the constructor
    on (its arguments may be what the forward trips over), a few times."""
    try:
        ns, loaded = load_standing_in(task["program"])
    except Exception as exc:  # noqa: BLE001 - the program does not even load
        reason = classify(exc, task)
        return {"ok": False, "reason": "import_error" if reason == "gave_up" else reason,
                "error": _error_text(exc)}
    search = InitSearch(ns, ns[task["class"]], task)
    budget = task.get("budget_s", 20)
    deadline = time.monotonic() + budget
    last, fwd_attempts = None, 0
    for _ in range(task.get("init_rounds", 3)):
        try:
            model, init = search.next_model(max(1.0, deadline - time.monotonic()))
            model = _inference(model)
        except Exception:  # noqa: BLE001 - no further constructor arguments construct
            if last is None:
                raise
            break
        n_params = _count_params(model)
        if n_params > task.get("max_params", 20_000_000):
            return {"ok": False, "reason": "too_large", "error": f"{n_params} parameters"}
        arity = forward_arity(model)
        if isinstance(arity, str):
            return {"ok": False, "reason": arity, "error": f"forward of {task['class']}: {arity}"}
        names, star = arity
        if not names and not star:
            return {"ok": False, "reason": "output_ignores_input", "error": "forward takes no input"}
        try:
            inputs, n = find_inputs(model, names or ["x"], task,
                                    max(1.0, deadline - time.monotonic()))
        except NotImplementedError as exc:
            return {"ok": False, "reason": "no_forward", "error": _error_text(exc)}
        except (NeedsDownload, MemoryError, ImportError, FileNotFoundError,
                urllib.error.URLError):
            raise
        except Exception as exc:  # noqa: BLE001 - try other constructor arguments
            last, fwd_attempts = exc, fwd_attempts + task.get("max_forward", 40)
            search.state = search.advance(search.current, exc)
            if time.monotonic() > deadline:
                break
            continue
        return {"ok": True, "init": init, "kw_init": [p.name for p in search.kw],
                "inputs": inputs, "params": n_params, "attempts": search.attempts + n,
                "program": loaded if loaded != task["program"] else None}
    raise last


# -- check ---------------------------------------------------------------------------------

def _tensors(obj) -> list:
    import torch
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    return []


def _same(a: list, b: list) -> bool:
    import torch
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype and torch.equal(
            torch.nan_to_num(x.detach().float()), torch.nan_to_num(y.detach().float()))
        for x, y in zip(a, b))


def _run(ns: dict, model_seed: int, input_seed: int, model=None):
    import torch
    if model is None:
        torch.manual_seed(model_seed)
        model = _inference(ns["Model"](*ns["get_init_inputs"]()))
    torch.manual_seed(input_seed)
    inputs = ns["get_inputs"]()
    torch.manual_seed(input_seed)
    with torch.no_grad():
        out = model(*inputs)
    return model, inputs, _tensors(out)


def _returns_input(out, inputs) -> bool:
    """Every output tensor is one of the inputs, unchanged."""
    outs = _tensors(out)
    return bool(outs) and all(any(_same([o], [i]) for i in _tensors(inputs)) for o in outs)


def _rerun(model, inputs) -> list:
    """The same model on the same inputs, the random number generator elsewhere."""
    import torch
    torch.manual_seed(12345)
    with torch.no_grad():
        return _tensors(model(*inputs))


def check(task: dict) -> dict:
    """The gates a kept program passes, run on the program text itself."""
    ns = load(task["program"])
    model, inputs, out1 = _run(ns, 0, 1)
    if not out1:
        return {"ok": False, "reason": "no_compute", "error": "forward returns no tensor"}
    if _returns_input(out1, inputs):
        return {"ok": False, "reason": "no_compute", "error": "forward returns its input"}
    _, _, out2 = _run(ns, 0, 1)
    if not _same(out1, out2):
        return {"ok": False, "reason": "nondeterministic",
                "error": "two runs under the same seed differ"}
    if not _same(out1, _rerun(model, inputs)):
        return {"ok": False, "reason": "nondeterministic",
                "error": "the output depends on the random number generator's state (dropout, "
                         "random ops in forward): no candidate can be compared with it"}
    _, _, out3 = _run(ns, 0, 2, model)
    if _same(out1, out3):
        return {"ok": False, "reason": "output_ignores_input",
                "error": "other inputs gave the same output"}
    if task.get("graph_breaks"):
        import torch
        import torch._dynamo
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(*inputs)
        if explained.graph_break_count:
            why = "; ".join(str(b.reason) for b in explained.break_reasons[:3])
            return {"ok": False, "reason": "graph_break", "error": why[:2000]}
    return {"ok": True, "outputs": [list(t.shape) for t in out1]}
