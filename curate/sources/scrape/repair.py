"""Forward inputs as search states, and the repairs an exception message suggests.

A state is a tuple of inputs, each `("f", shape)` (torch.randn: signed, so that activations
are not the identity) or `("l", shape, high)`
(torch.randint(0, high)); states are hashable so that the search never tries one twice.
Each rule reads one kind of message (rank, channels, features, dtype, unpacking, sizes) and
proposes new states, most specific first. Restarts are whole states in other ranks.
"""

from __future__ import annotations

import math
import re

INTEGER_NAMES = ("idx", "ids", "index", "indices", "token", "tokens", "label", "labels",
                 "target", "targets", "lengths", "input_ids", "positions", "classes")
RESTART_SHAPES = ((4, 4, 4, 4), (4, 4, 4), (4, 4), (4, 3, 32, 32), (4, 4, 4, 4, 4), (4,),
                  (4, 3, 64, 64), (4, 16, 8, 8), (4, 3, 224, 224))


def _item_for(name: str, shape: tuple) -> tuple:
    low = name.lower()
    if any(low == w or low.endswith("_" + w) or low.startswith(w) for w in INTEGER_NAMES):
        return ("l", shape[:2], 4)
    return ("f", shape)


def restarts(names: list[str]) -> list[tuple]:
    return [tuple(_item_for(n, s) for n in names) for s in RESTART_SHAPES]


def render(state: tuple) -> str:
    parts = []
    for it in state:
        if it[0] == "f":
            parts.append(f"torch.randn({list(it[1])})")
        else:
            parts.append(f"torch.randint(0, {it[2]}, {list(it[1])})")
    return "[" + ", ".join(parts) + "]"


def numel(state: tuple) -> int:
    return sum(math.prod(it[1]) for it in state)


def larger(state: tuple) -> list[tuple]:
    """The state with its last two sizes four times larger (up to 64): for a forward that
    gave back its input (a resize or a crop to the size it was given)."""
    grown = list(state)
    for i in _floats(state):
        shape = list(state[i][1])
        if len(shape) >= 2 and max(shape[-2:]) < 64:
            grown[i] = (state[i][0], tuple(shape[:-2] + [s * 4 for s in shape[-2:]]),
                        *state[i][2:])
    return [tuple(grown)] if tuple(grown) != state else []


def _replace(state: tuple, i: int, item: tuple) -> tuple:
    return state[:i] + (item,) + state[i + 1:]


def _set_shape(state: tuple, i: int, shape) -> tuple:
    return _replace(state, i, (state[i][0], tuple(shape), *state[i][2:]))


def _floats(state: tuple) -> list[int]:
    return [i for i, it in enumerate(state) if it[0] == "f"] or list(range(len(state)))


def _with_rank(state: tuple, rank: int) -> list[tuple]:
    return [_set_shape(state, i, (4,) * rank) for i in _floats(state)] if 0 < rank < 7 else []


def _with_dim(state: tuple, dim: int, size: int) -> list[tuple]:
    out = []
    for i in _floats(state):
        shape = list(state[i][1])
        if -len(shape) <= dim < len(shape) and 0 < size <= 4096:
            shape[dim] = size
            out.append(_set_shape(state, i, shape))
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"-?\d+", text)]


def _rank(state, m):
    nums = [int(x) for x in m.groups() if x]
    return _with_rank(state, max(nums))


def _channels(state, m):
    return _with_dim(state, 1, int(m.group(1)))


def _matmul(state, m):
    k = int(m.group(3))
    out = _with_dim(state, -1, k)
    for i in _floats(state):  # a flatten before the linear layer
        batch = state[i][1][0]
        out.append(_set_shape(state, i, (batch, k)))
    return out


def _broadcast(state, m):
    a, b, dim = int(m.group(1)), int(m.group(2)), int(m.group(3))
    out = []
    for i in _floats(state):
        shape = list(state[i][1])
        for d in {dim, dim - 1, len(shape) - 1}:
            if 0 <= d < len(shape):
                for new in (b, a):
                    s = list(shape)
                    s[d] = new
                    out.append(_set_shape(state, i, s))
    return out


def _normalized(state, m):
    dims = _ints(m.group(1))
    out = []
    for i in _floats(state):
        shape = list(state[i][1])
        if len(shape) > len(dims):
            out.append(_set_shape(state, i, shape[:len(shape) - len(dims)] + dims))
        out.append(_set_shape(state, i, [4] + dims))
    return out


def _last_dim(state, m):
    return _with_dim(state, -1, int(m.group(1)))


def _unpack(state, m):
    n = int(m.group(1))
    return _with_rank(state, n) + _with_dim(state, 0, n)


def _dim_range(state, m):
    got = int(m.group(3))
    return _with_rank(state, got + 1 if got >= 0 else -got)


def _to_long(state, m):
    for i, it in enumerate(state):
        if it[0] == "f":
            return [_replace(state, i, ("l", it[1], 4))]
    return []


def _smaller_index(state, m):
    out = []
    for i, it in enumerate(state):
        if it[0] == "l" and it[2] > 1:
            out.append(_replace(state, i, ("l", it[1], max(1, it[2] // 2))))
    return out


def _more_inputs(state, m):
    return [state + (("f", state[-1][1] if state else (4, 4, 4, 4)),)]


def _fewer_inputs(state, m):
    return [state[:-1]] if len(state) > 1 else []


def _view(state, m):
    dims = _ints(m.group(1))
    dims = [4 if d == -1 else d for d in dims]
    if not dims or any(d <= 0 for d in dims):
        return []
    return [_set_shape(state, i, dims) for i in _floats(state)]


def _image(state, m):
    nums = [int(x) for x in m.groups() if x]
    h = nums[len(nums) // 2] if len(nums) > 1 else nums[0]
    w = nums[-1]
    out = []
    for i in _floats(state):
        out.append(_set_shape(state, i, (4, 3, h, w)))
    return out


def _too_small(state, m):
    out = []
    for i in _floats(state):
        shape = list(state[i][1])
        if len(shape) >= 3 and max(shape[2:]) < 256:
            out.append(_set_shape(state, i, shape[:2] + [s * 4 for s in shape[2:]]))
    return out


def _like_first(state, m):
    """A target that must have the input's shape and dtype."""
    shape = state[0][1]
    return [tuple(("f", shape) for _ in state)] if len(state) > 1 else []


def _running(state, m):
    return _with_dim(state, 1, int(m.group(1)))


RULES = [
    (r"normalized_shape=\[([\d, ]+)\]", _normalized),
    (r"expected input\[.*?\] to have (\d+) channels", _channels),
    (r"running_mean should contain (\d+) elements", _running),
    (r"mat1 and mat2 shapes cannot be multiplied \((\d+)x(\d+) and (\d+)x(\d+)\)", _matmul),
    (r"size of tensor a \((\d+)\) must match the size of tensor b \((\d+)\) at non-singleton "
     r"dimension (\d+)", _broadcast),
    (r"expanded size of the tensor \((\d+)\) must match the existing size \((\d+)\) at "
     r"non-singleton dimension (\d+)", _broadcast),
    (r"input\.size\(-1\) must be equal to input_size\. Expected (\d+)", _last_dim),
    (r"Input image size \((\d+)\*(\d+)\) doesn't match model \((\d+)\*(\d+)\)", _image),
    (r"Input (?:height|width) \((\d+)\) doesn't match model \((\d+)\)", _image),
    (r"Output size is too small", _too_small),
    (r"Kernel size can't be greater than actual input size", _too_small),
    (r"Expected \d+D \(unbatched\) or (\d+)D \(batched\)", _rank),
    (r"[Ee]xpected (\d+)D (?:input|tensor)|expected (\d+)D or (\d+)D input", _rank),
    (r"(\d+)-dimensional input", _rank),
    (r"input must have (\d+) dimensions", _rank),
    (r"not enough values to unpack \(expected (\d+)", _unpack),
    (r"too many values to unpack \(expected (\d+)\)", _unpack),
    (r"Dimension out of range \(expected to be in range of \[(-?\d+), (-?\d+)\], but got "
     r"(-?\d+)\)", _dim_range),
    (r"scalar types: Long, Int|expected scalar type Long|tensors used as indices must be "
     r"long|must be Long|Expected dtype int64|only integer tensors", _to_long),
    (r"index out of range in self|index \d+ is out of bounds|out of bounds for dimension", 
     _smaller_index),
    (r"[Tt]arget size .* (?:must be the same as|that is different to the) input size|"
     r"input and target|target and input", _like_first),
    (r"missing \d+ required positional argument", _more_inputs),
    (r"takes \d+ positional arguments? but \d+ were given", _fewer_inputs),
    (r"shape '\[([-\d, ]+)\]' is invalid for input of size", _view),
]
_COMPILED = [(re.compile(p), f) for p, f in RULES]


def repairs(state: tuple, message: str) -> list[tuple]:
    """New states the message suggests, most specific first (may be empty)."""
    out: list[tuple] = []
    for pattern, rule in _COMPILED:
        m = pattern.search(message)
        if m:
            out += [s for s in rule(state, m) if s and s != state]
    return list(dict.fromkeys(out))
