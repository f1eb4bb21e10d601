"""Stand-ins for what a scraped module reads from outside: config objects, parsed command-line
arguments, YAML/JSON files. Every field asked for gets a small value guessed from its name and
is remembered (`_Mock._asked`), so a kept program states what it was given.

MOCK_SOURCE is text because it is pasted into every program that needs it (a kept program runs
alone in a fresh interpreter); `namespace()` executes the same text for the deduction worker.
"""

from __future__ import annotations

MOCK_SOURCE = '''
def _guess(key):
    """A small value for a config field, from its name."""
    k = str(key).lower()
    if any(w in k for w in ("drop", "prob", "dropout")):
        return 0.0
    if "eps" in k:
        return 1e-05
    if "momentum" in k:
        return 0.1
    if k.startswith(("use_", "is_", "with_", "enable", "has_", "no_")) or k in (
            "bias", "affine", "bidirectional", "batch_first", "inplace", "residual",
            "pretrained", "debug", "verbose", "training"):
        return False
    if k in ("act", "activation", "act_layer", "nonlinearity", "act_fn", "hidden_act"):
        return "relu"
    if "factor" in k:
        return 2
    if "output_size" in k or "out_size" in k:
        return 2
    if "norm_type" in k:
        return 2.0
    if "kernel" in k:
        return 3
    if k in ("stride", "dilation", "groups") or k.endswith("_stride"):
        return 1
    if "pad" in k:
        return 1
    if "head" in k:
        return 2
    if any(w in k for w in ("layers", "depth", "blocks", "n_layer", "num_layer")):
        return 1
    if k in ("lr", "learning_rate") or any(
            w in k for w in ("alpha", "beta", "gamma", "scale", "temp", "weight_decay")):
        return 1.0
    if any(w in k for w in ("mode", "type", "name", "method", "path", "dir", "file", "norm")):
        return None
    return 4


class _Mock:
    """A config object, parsed arguments or a file's contents: fields are guessed and kept."""

    def __init__(self, _name="config", **given):
        self.__dict__["_name"] = _name
        self.__dict__["_asked"] = dict(given)

    def __getattr__(self, key):
        if key.startswith("__"):
            raise AttributeError(key)
        asked = self.__dict__["_asked"]
        if key not in asked:
            asked[key] = _guess(key)
        return asked[key]

    def __setattr__(self, key, value):
        self.__dict__["_asked"][key] = value

    __getitem__ = __getattr__
    __setitem__ = __setattr__

    def get(self, key, default=None):
        if default is not None:
            return self.__dict__["_asked"].setdefault(key, default)
        return self.__getattr__(key)

    def __contains__(self, key):
        return True

    def __iter__(self):
        return iter(self.__dict__["_asked"])

    def keys(self):
        return self.__dict__["_asked"].keys()

    def items(self):
        return self.__dict__["_asked"].items()

    def __bool__(self):
        return True

    def __repr__(self):
        return f"_Mock({self.__dict__['_name']!r}, **{self.__dict__['_asked']!r})"
'''

# an outside import that fails while the program loads (timm's table of norm layers names
# torchvision's FrozenBatchNorm2d, and that torchvision does not import against this torch)
UNAVAILABLE_SOURCE = '''
class _UnavailableType(type):
    """An outside name that does not import here: the program loads, using the name raises."""

    def __call__(cls, *args, **kwargs):
        raise ImportError(f"{cls.__qualname__} does not import here: {cls._why}")

    def __getattr__(cls, key):
        if key.startswith("__"):
            raise AttributeError(key)
        raise ImportError(f"{cls.__qualname__} does not import here: {cls._why}")


def _unavailable(name, why):
    return _UnavailableType(name, (), {"_why": why})
'''

# constructor parameters passed a _Mock: config objects under their usual names
CONFIG_PARAMS = ("config", "cfg", "conf", "args", "opt", "opts", "hparams", "hp", "params",
                 "options", "settings", "hyperparams", "model_cfg", "model_config", "configs")

# calls whose result, at a module's top level, is read from outside (files, argv)
READER_CALLS = {"parse_args", "parse_known_args", "safe_load", "full_load", "load", "loads",
                "read_csv", "loadtxt", "open", "read", "read_text", "ConfigParser",
                "load_config", "get_config", "from_file", "from_yaml", "from_json"}


def namespace() -> dict:
    """`_guess` and `_Mock`, executed from MOCK_SOURCE (the worker's copy)."""
    ns: dict = {}
    exec(compile(MOCK_SOURCE, "<curate-mocks>", "exec"), ns)  # noqa: S102 - our own text
    return ns
