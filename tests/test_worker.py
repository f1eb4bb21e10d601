"""verify's worker side through its handler, in this process: every request decoded, served and
answered in the protocol's form; the digest; the transports; comparison and the pieces the
worker is made of. (The sandboxed workers themselves are tests/test_verify.py's.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from curate.verify import messages as m
from curate.verify.worker import main, session, transport
from curate.verify.worker.compare import compare, flatten_outputs
from curate.verify.worker.digest import digest

FIX = Path(__file__).parent / "fixtures" / "verify"

REF = """
import torch


class Model(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.w + 1.0


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return [8]
"""

HONEST = """
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.w + 1.0   # the same bits as the reference's
"""

WRONG = HONEST.replace("+ 1.0", "+ 1.5")

REUSE = """
import torch


class ModelNew(torch.nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(n))
        self.out = None

    def forward(self, x):
        if self.out is None:
            self.out = x * self.w + 1.0
        return self.out
"""


def ask(msg: m.Message) -> m.Message:
    """One request through the worker's handler, the reply decoded as the parent would."""
    return m.decode(main.handle(m.encode(msg)), expect=m.REPLIES)


def load(role: str, kernel: str | None = HONEST, **kw) -> m.Message:
    return ask(m.Load(role=role, device="cpu", pytorch_code=REF,
                      kernel_code=kernel if role == "candidate" else None, seed_init=3,
                      seeds=[11, 12], poke=5, tag="t", gates=False, **kw))


CALLS = [[0, 1.0], [1, 1.0], [0, -0.5], [2, 1.0]]


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch):
    """Programs are written into the worker's working directory, as in a sandbox's scratch."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    yield tmp_path
    session._current = None


def candidate_outputs(kernel: str = HONEST, **kw) -> tuple[list, list, list]:
    """A candidate's row up to its fetched outputs: (digests, fetched outputs, batch)."""
    loaded = load("candidate", kernel, **kw)
    assert isinstance(loaded, m.Loaded), loaded
    batch = ask(m.Calls(calls=CALLS, check=2, keep=True))
    assert isinstance(batch, m.Batch) and batch.digests == [], batch   # untimed: no commitment
    timed = ask(m.Calls(calls=CALLS, timed=True, keep=True))
    assert isinstance(timed, m.Batch), timed
    fetched = [ask(m.Fetch(index=i, transport="inline")) for i in range(len(CALLS))]
    return timed.digests, fetched, batch


def test_every_request_round_trips_through_the_handler():
    """Compile, Load, Calls, Fetch, Finish in the candidate's worker; Load, Reference,
    Calls, Compare, Finish in the judge; every reply is one of the protocol's messages."""
    compiled = ask(m.Compile(pytorch_code=REF, kernel_code=HONEST, tag="t", size=True))
    assert isinstance(compiled, m.Compiled) and compiled.import_s is not None
    assert set(compiled.size_gb) == {"inputs", "outputs", "params"}  # tiny: 0.0 GiB each
    assert not compiled.recycle

    digests, fetched, batch = candidate_outputs()
    assert len(batch.ms) == len(CALLS) and batch.structure == "tensor"
    assert batch.out_bytes == 4 * 8 * 4
    assert len(digests) == len(CALLS) and len(set(digests)) == len(CALLS)
    assert all(isinstance(o, m.Outputs) and o.outputs["transport"] == "inline" for o in fetched)
    assert [o.digest for o in fetched] == digests  # the fetched bytes are the committed ones
    finished = ask(m.Finish())
    assert isinstance(finished, m.Finished) and not finished.recycle
    assert finished.notes["import_s"] >= 0 and finished.notes["parameters"] == "by_name"

    assert isinstance(load("judge"), m.Loaded)
    ref = ask(m.Reference(calls=CALLS))
    assert isinstance(ref, m.Batch) and len(ref.ms) == len(CALLS)
    again = ask(m.Calls(calls=CALLS, timed=True, keep=True))
    assert again.digests == digests  # same seeds, same parameters, same bits
    for call, out in zip(CALLS, fetched):
        got = ask(m.Compare(call=call, outputs=out.outputs, structure=out.structure,
                            transport="inline", digest=out.digest))
        assert isinstance(got, m.Compared) and got.ok, got
    timed = ask(m.Calls(calls=CALLS[:2], timed=True, keep=False))
    assert isinstance(timed, m.Batch) and len(timed.ms) == 2 and timed.structure is None
    assert timed.digests == []    # nothing kept from that batch, nothing committed
    end = ask(m.Finish())
    assert isinstance(end, m.Finished) and end.comparison["ok"] is True
    assert end.env["torch_version"] == torch.__version__
    assert isinstance(ask(m.Release()), m.Released)


@pytest.mark.parametrize("candidate", ["honest", "wrong"])
def test_a_judge_that_keeps_no_reference_output_computes_each_again(candidate):
    """Large reference outputs are not all kept on the device: each is computed again when its
    call is compared, with the same verdict as when kept."""
    _, fetched, _ = candidate_outputs(HONEST if candidate == "honest" else WRONG)
    ask(m.Finish())
    load("judge")
    assert isinstance(ask(m.Reference(calls=CALLS, keep_bytes=0)), m.Batch)
    assert session.current("judge").ref_out == {}
    oks = [ask(m.Compare(call=call, outputs=out.outputs, structure=out.structure,
                         transport="inline", digest=out.digest)).ok
           for call, out in zip(CALLS, fetched)]
    assert all(oks) if candidate == "honest" else not any(oks)
    assert ask(m.Finish()).comparison["ok"] is (candidate == "honest")


@pytest.mark.parametrize("candidate", ["honest", "wrong"])
def test_a_checked_timed_output_is_compared_with_the_judges_own_output_of_that_call(candidate):
    """After a timed batch the judge holds its own outputs of those calls: a checked call is
    compared with that output (no forward again, and the batch's other outputs let go before
    the comparison); a call the batch did not make is computed again. Same verdicts."""
    _, fetched, _ = candidate_outputs(HONEST if candidate == "honest" else WRONG)
    ask(m.Finish())
    load("judge")
    assert isinstance(ask(m.Reference(calls=CALLS, keep_bytes=0)), m.Batch)
    s = session.current("judge")
    forwards = []
    real = s.runner.output
    s.runner.output = lambda *call: forwards.append(call) or real(*call)
    assert len(ask(m.Calls(calls=CALLS[1:3], timed=True, keep=True)).digests) == 2
    got = ask(m.Compare(call=CALLS[2], outputs=fetched[2].outputs, transport="inline",
                        structure=fetched[2].structure, digest=fetched[2].digest))
    assert forwards == [] and s.kept is None and s.kept_calls == []
    other = ask(m.Compare(call=CALLS[3], outputs=fetched[3].outputs, transport="inline",
                          structure=fetched[3].structure, digest=fetched[3].digest))
    assert forwards == [(CALLS[3][0], CALLS[3][1])]
    assert got.ok is other.ok is (candidate == "honest")


def test_input_sets_made_again_hand_out_the_sized_set_once_then_remake_it():
    """Set 0, made to learn the sets' size, is the first request's (no second `get_inputs`);
    later requests make it again from its seed, the same bits in new tensors."""
    import types

    from curate.verify.worker.models import InputSets
    made = []

    def get_inputs():
        made.append(1)
        return [torch.randn(64)]

    mod = types.SimpleNamespace(get_inputs=get_inputs)
    sets = InputSets(mod, [11, 12], "cpu", poke=5, keep_bytes=16)
    assert sets.remade and len(made) == 1 and len(sets) == 3
    first = sets[0]
    assert len(made) == 1
    again = sets[0]
    assert len(made) == 2 and again[0] is not first[0] and torch.equal(again[0], first[0])
    assert not torch.equal(sets[2][0], first[0]) and len(made) == 3   # poked, from set 0


def test_input_sets_made_again_from_their_seed_are_the_kept_sets_bits():
    """A worker that keeps no input set (`keep_bytes=0`: each made again at every call) gives
    the same outputs, bit for bit, as one that keeps them, in the candidate and the judge;
    the poked set too."""
    kept, _, _ = candidate_outputs()
    ask(m.Finish())
    remade, fetched, _ = candidate_outputs(keep_bytes=0)
    assert session.current("candidate").runner.remade
    assert remade == kept
    ask(m.Finish())
    load("judge", keep_bytes=0)
    assert isinstance(ask(m.Reference(calls=CALLS, keep_bytes=0)), m.Batch)
    assert ask(m.Calls(calls=CALLS, timed=True, keep=True)).digests == kept
    for call, out in zip(CALLS, fetched):
        assert ask(m.Compare(call=call, outputs=out.outputs, structure=out.structure,
                             transport="inline", digest=out.digest)).ok
    assert ask(m.Finish()).comparison["ok"] is True


def test_seeding_formats_no_stack_on_either_device(monkeypatch):
    """A set made again is seeded at every timed call, inside the parent's clock, and in the
    candidate's worker each stack formatted walks its frames under the audit hook: seeding may
    not format one. `torch.manual_seed` does (it queues seeds for XPU and MTIA, and for CUDA
    where no context exists yet). The GPU path is taken here with a CUDA stand-in whose
    context exists: its generators get the seed, the CPU generator gets the same bits as
    `torch.manual_seed`, and no stack is formatted."""
    import traceback
    from types import SimpleNamespace

    from curate.verify.worker import models

    torch.manual_seed(7)
    want = torch.rand(4)

    def no_stack(*a, **k):
        raise AssertionError("seeding formatted a stack")

    gens = [torch.Generator(), torch.Generator()]
    monkeypatch.setattr(traceback, "format_stack", no_stack)
    monkeypatch.setattr(models, "_CUDA", SimpleNamespace(is_initialized=lambda: True,
                                                         default_generators=gens))
    for device in ("cpu", "cuda"):
        models.seed_all(7, device)
        assert torch.equal(torch.rand(4), want), device
    assert [g.initial_seed() for g in gens] == [7, 7]


def test_a_wrong_candidate_fails_the_comparison_and_the_judge_says_why():
    _, fetched, _ = candidate_outputs(WRONG)
    ask(m.Finish())
    load("judge")
    ask(m.Reference(calls=CALLS[:1]))
    got = ask(m.Compare(call=CALLS[0], outputs=fetched[0].outputs, transport="inline",
                        structure=fetched[0].structure))
    assert got.ok is False
    end = ask(m.Finish())
    assert end.comparison["ok"] is False and "output_mismatch" in end.comparison["reasons"]


def test_the_judge_reads_outputs_only_by_the_transport_the_parent_named():
    """A description of another transport than the Compare request's is `outputs_unreadable`,
    and an output that is not the one committed to is `digest_mismatch`: both fail."""
    _, fetched, _ = candidate_outputs()
    ask(m.Finish())
    load("judge")
    ask(m.Reference(calls=CALLS[:1]))
    out = fetched[0]
    other = ask(m.Compare(call=CALLS[0], outputs=out.outputs, transport="memfd"))
    assert other.ok is False
    assert [f.reason for f in other.findings] == ["outputs_unreadable"]
    assert other.findings[0].fatal
    forged = ask(m.Compare(call=CALLS[0], outputs=out.outputs, transport="inline",
                           digest=out.digest ^ 1))
    assert forged.ok is False and "digest_mismatch" in [f.reason for f in forged.findings]
    end = ask(m.Finish())
    assert {"outputs_unreadable", "digest_mismatch"} <= set(end.comparison["reasons"])


def test_failures_are_classified_replies_and_protocol_errors_raise():
    broken = ask(m.Load(role="candidate", device="cpu", pytorch_code=REF,
                        kernel_code="def oops(:\n", seed_init=0, seeds=[1], tag="t",
                        gates=False))
    assert isinstance(broken, m.Failed) and broken.status == "compile_error"
    assert broken.error.startswith("SyntaxError")
    none = load("candidate", "import torch\n")
    assert isinstance(none, m.Failed) and none.reasons == ["no_modelnew"]
    compile_error = ask(m.Compile(pytorch_code=REF, kernel_code="raise ImportError('no')"))
    assert isinstance(compile_error, m.Failed) and compile_error.status == "compile_error"
    assert compile_error.recycle

    assert isinstance(load("candidate", REUSE), m.Loaded)
    reused = ask(m.Calls(calls=CALLS, check=0))
    assert isinstance(reused, m.Failed) and reused.status == "deceptive"
    assert reused.reasons == ["output_reused"]
    assert [f.reason for f in reused.findings] == ["output_reused"]

    bad_ref = ask(m.Load(role="judge", device="cpu", pytorch_code=REF + "\nraise ValueError\n",
                         seed_init=0, seeds=[1], tag="t", gates=False))
    assert isinstance(bad_ref, m.Failed) and bad_ref.status == "reference_error"
    assert bad_ref.reasons[0] == "reference_failed"

    with pytest.raises(m.ProtocolError):
        main.handle({"kind": "load", "role": "candidate", "op": "load"})   # an unknown key
    with pytest.raises(m.ProtocolError):
        main.handle(m.encode(m.Loaded()))                                 # a reply, not a request
    with pytest.raises(RuntimeError, match="candidate session not loaded"):
        main.handle(m.encode(m.Fetch(index=0, transport="inline")))   # the judge's session
    load("candidate")
    ask(m.Calls(calls=CALLS[:1]))
    with pytest.raises(ValueError, match="unknown transport"):
        main.handle(m.encode(m.Fetch(index=0, transport="files")))


def test_digest_is_exact_deterministic_and_moves_with_any_byte():
    g = torch.Generator().manual_seed(0)
    items = [torch.randn(33, 17, generator=g), None, torch.arange(7, dtype=torch.int64),
             torch.tensor([True, False, True]), torch.randn(3, dtype=torch.float16),
             torch.empty(0, 4), torch.tensor(2.5)]
    d = digest(items)
    assert d == digest([x.clone() if isinstance(x, torch.Tensor) else x for x in items])
    assert 0 <= d < 2**63
    # the same values in another layout are the same output
    assert digest([items[0].t().contiguous().t()] + items[1:]) == d
    for i, x in enumerate(items):
        if not isinstance(x, torch.Tensor) or not x.numel():
            continue
        raw = x.clone().reshape(-1).view(torch.uint8)
        for byte in (0, raw.numel() - 1):
            changed = raw.clone()
            changed[byte] ^= 1
            moved = list(items)
            moved[i] = changed.view(x.dtype).reshape(x.shape)
            assert digest(moved) != d, (i, byte)
    swapped = items[0].clone()
    swapped[0, 0], swapped[0, 1] = items[0][0, 1], items[0][0, 0]
    assert digest([swapped] + items[1:]) != d            # values moved between positions
    assert digest(items[1:]) != d and digest(items[:1] + items[2:]) != d
    assert digest([items[0].reshape(17, 33)] + items[1:]) != d    # the shape counts
    assert digest([items[0].view(torch.int32)] + items[1:]) != d  # the dtype counts


def test_digest_reads_words_of_every_width_across_chunks(monkeypatch):
    """Sizes that make 8-, 4- and 1-byte words, over several chunks and a tail (rows and chunks
    made small): a byte changed or two words swapped anywhere moves the digest; a view that
    starts between words digests as its own copy does (the judge receives a copy)."""
    from curate.verify.worker import digest as dg
    monkeypatch.setattr(dg, "ROW", 8)
    monkeypatch.setattr(dg, "CHUNK", 8 * 4)
    monkeypatch.setattr(dg, "SMALL", 16)      # these sizes take the rows-and-columns path
    g = torch.Generator().manual_seed(3)
    base = torch.randn(1001, generator=g)
    for t in (base[1:201], base[1:200], base.view(torch.uint8)[3:402], base[3:15]):
        assert t.storage_offset() > 0
        word = {0: 8, 4: 4}.get(t.numel() * t.element_size() % 8, 1)
        assert dg._words(t).element_size() == word
        d = digest([t])
        assert d == digest([t.clone()])
        raw = t.clone().view(torch.uint8)
        for byte in (0, raw.numel() // 2, raw.numel() - 1):
            changed = raw.clone()
            changed[byte] ^= 1
            assert digest([changed.view(t.dtype)]) != d, (word, byte)
        for i, j in ((0, 1), (0, 8), (3, t.numel() - 2), (9, 41)):
            swapped = t.clone()
            if j >= t.numel() or swapped[i] == swapped[j]:
                continue
            swapped[i], swapped[j] = t[j], t[i]
            assert digest([swapped]) != d, (word, i, j)


def test_a_small_outputs_one_product_digests_as_its_rows_and_columns_do(monkeypatch):
    """Outputs of at most SMALL words take one weighted sum: the same digest as the rows and
    columns give (SMALL made 0 forces that path), at sizes of whole rows and with a tail."""
    from curate.verify.worker import digest as dg
    g = torch.Generator().manual_seed(5)
    outs = [torch.randn(n, generator=g) for n in (1, 7, 2 * dg.ROW, 2 * dg.ROW + 6, 2 * dg.SMALL)]
    outs += [torch.randint(-2**62, 2**62, (dg.SMALL,), generator=g, dtype=torch.int64),
             torch.randint(0, 255, (3 * dg.ROW + 5,), generator=g, dtype=torch.uint8)]
    small = [dg.digest([t]) for t in outs]
    monkeypatch.setattr(dg, "SMALL", 0)
    assert [dg.digest([t]) for t in outs] == small


def test_call_inputs_are_written_scaled_into_the_same_buffers_and_pristine_is_a_copy():
    """Every call writes its set, scaled, into the buffers every call uses (the base set itself
    untouched); `pristine` is a separate copy with the same values."""
    from curate.verify.worker.calls import CallRunner
    g = torch.Generator().manual_seed(2)
    sets = [[torch.randn(4, 3, generator=g), torch.arange(3), 2.0],
            [torch.randn(3, 4, generator=g).t(), torch.arange(3), 2.0]]   # another layout
    base = sets[0][0].clone()
    runner = CallRunner(lambda *a: a[0], sets, "cpu", timers=None)
    a = runner.inputs(0, 1.25)
    ptr = a[0].data_ptr()
    assert torch.equal(a[0], base * 1.25) and torch.equal(a[1], sets[0][1]) and a[2] == 2.0
    assert runner.inputs(0, 1.0)[0].data_ptr() == ptr
    assert torch.equal(runner.inputs(0, 1.0)[0], base) and torch.equal(sets[0][0], base)
    p = runner.pristine(0, 1.25)
    assert p[0].data_ptr() != ptr and torch.equal(p[0], base * 1.25)
    assert torch.equal(runner.inputs(1, 1.5)[0], sets[1][0] * 1.5)
    assert torch.equal(runner.pristine(1, 1.0)[0], sets[1][0])


def test_sets_made_again_are_written_into_the_same_buffers_every_call():
    """A set made again at each call is written into the buffers every call uses: the same
    tensors at the same addresses (a cache keyed by pointer must answer, and be caught), with
    the right values."""
    import types

    from curate.verify.worker.calls import CallRunner
    from curate.verify.worker.models import InputSets
    mod = types.SimpleNamespace(get_inputs=lambda: [torch.randn(256), 3])
    sets = InputSets(mod, [11, 12, 13], "cpu", keep_bytes=16)
    runner = CallRunner(lambda x, n: x * n, sets, "cpu", timers=None)
    first = runner.inputs(0, 1.0)
    ptr = first[0].data_ptr()
    for k, scale in ((1, 1.5), (2, 1.0), (0, 1.25)):
        args = runner.inputs(k, scale)
        assert args[0] is first[0] and args[0].data_ptr() == ptr and args[1] == 3
        torch.manual_seed(sets.seeds[k])
        assert torch.equal(args[0], torch.randn(256) * scale)


def test_the_judge_describes_sets_made_again_in_its_buffers_not_beside_them():
    """The record's description of sets made again is the same as of kept sets, read from the
    runner's buffers: no set is made beside them (a whole set more at the judge's load)."""
    from curate.verify.worker.calls import CallRunner
    from curate.verify.worker.models import InputSets, describe_sets
    mod, made = _made_by(lambda: [torch.randn(256), torch.rand(8, 32), 3])
    kept = describe_sets(InputSets(mod, [11, 12, 13], "cpu"), 3)
    sets = InputSets(mod, [11, 12, 13], "cpu", keep_bytes=16)
    runner = CallRunner(lambda x, y, n: x, sets, "cpu", timers=None)
    bufs = {x.data_ptr() for x in runner.bufs if isinstance(x, torch.Tensor)}
    made.clear()
    assert describe_sets(sets, 3, runner) == kept
    assert set(made) <= bufs, "a set was made beside the buffers"
    made.clear()
    describe_sets(sets, 3)
    assert set(made) - bufs, "the check cannot see a set made beside the buffers"


def _made_by(body):
    """A reference module whose get_inputs is `body` and records every factory result."""
    import types
    made = []

    def get_inputs():
        out = body()
        made.extend(x.data_ptr() for x in out if isinstance(x, torch.Tensor))
        return out
    return types.SimpleNamespace(get_inputs=get_inputs), made


INPUT_BODIES = {
    "factories": lambda: [torch.randn(64, 32), torch.rand(32), 7],
    "computed": lambda: [torch.rand(64, 32) * torch.rand(()), torch.rand(64, 32)],
    "chained": lambda: [(torch.rand(4, 16) * 3).softmax(dim=-1), torch.rand(4, 16).softmax(-1)],
    "filled_after": lambda: [torch.empty(128).uniform_(-2, 2), torch.zeros(3).add_(1)],

    "mixed_dtypes": lambda: [torch.rand(16), torch.randint(0, 2, (16,)).float() * 2 - 1,
                             torch.randint(0, 5, (16,))],
}


@pytest.mark.parametrize("body", sorted(INPUT_BODIES))
def test_a_set_made_into_its_buffers_has_the_bits_of_one_made_as_usual(body):
    """Sets made again are made straight into the buffers (worker/into.py): the same bits as
    get_inputs() made as usual under the same seed (the judge and the candidate agree however
    each made it), the buffers at the same addresses, and no tensor of the set's size made
    beside them where get_inputs only calls factories."""
    from curate.verify.worker.models import make_inputs, make_inputs_into
    mod, made = _made_by(INPUT_BODIES[body])
    bufs = make_inputs(mod, 1, "cpu")
    ptrs = [x.data_ptr() for x in bufs if isinstance(x, torch.Tensor)]
    for seed in (2, 3, 2):
        plain = make_inputs(mod, seed, "cpu")
        made.clear()
        got = make_inputs_into(mod, seed, "cpu", bufs)
        assert got is not None
        assert [x.data_ptr() for x in got if isinstance(x, torch.Tensor)] == ptrs
        for x, y in zip(got, plain):
            assert torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
        if body == "factories":
            assert made == ptrs   # nothing returned was made outside the buffers


def test_only_factories_for_the_buffers_device_fill_them():
    """A factory asked for another device draws on that device's generator (other bits than
    the buffer's device would give), and `empty` holds whatever its memory held: neither fills
    a buffer."""
    from curate.verify.worker.into import IntoBuffers
    buf = torch.zeros(32)
    with IntoBuffers([buf]):
        other = torch.randn(32, device="meta")
        unset = torch.empty(32)
        mine = torch.randn(32)
    assert other.device.type == "meta" and unset is not buf
    assert mine.data_ptr() == buf.data_ptr()


def test_a_set_whose_tensors_share_memory_is_made_as_usual():
    """A set that returns one tensor twice (or one tensor's view beside it) cannot be written
    into itself position by position: it is made beside the buffers, as before."""
    from curate.verify.worker.models import make_inputs, make_inputs_into
    x = torch.randn(8)
    assert make_inputs_into(_made_by(lambda: [x, x])[0], 2, "cpu", [x, x]) is None
    swapped, _ = _made_by(lambda: (lambda a, b: [b, a])(torch.randn(8), torch.randn(8)))
    bufs = make_inputs(swapped, 1, "cpu")
    got = make_inputs_into(swapped, 2, "cpu", bufs)
    for g, p in zip(got, make_inputs(swapped, 2, "cpu")):
        assert torch.equal(g, p)
    assert [g.data_ptr() for g in got] == [b.data_ptr() for b in bufs]


def test_a_call_that_changed_its_inputs_is_told_without_a_second_set():
    """For sets made again, whether a call changed its inputs is read from digests of the
    buffers as it left them and written again (no pristine set beside them); an output in the
    buffers' memory keeps its values (the check falls back to a pristine copy)."""
    import types

    from curate.verify.worker.calls import CallRunner
    from curate.verify.worker.models import InputSets
    mod = types.SimpleNamespace(get_inputs=lambda: [torch.randn(512), torch.randn(512)])
    made = []
    sets = InputSets(mod, [11, 12], "cpu", keep_bytes=16)
    real_pristine = sets.__class__.__getitem__

    def counting(self, k):
        made.append(k)
        return real_pristine(self, k)
    runner = CallRunner(None, sets, "cpu", timers=None)
    sets.__class__.__getitem__ = counting
    try:
        args = runner.inputs(1, 1.5)
        out = args[0] + args[1]
        assert runner.unchanged(1, 1.5, args, keep=[out]) and not made
        args = runner.inputs(0, 1.0)
        args[1].mul_(0)
        assert not runner.unchanged(0, 1.0, args, keep=[]) and not made
        torch.manual_seed(11)
        assert torch.equal(args[1], [torch.randn(512), torch.randn(512)][1])  # written again
        args = runner.inputs(1, 1.0)
        same = args[0]                       # the output is the input: left as the call left it
        assert runner.unchanged(1, 1.0, args, keep=[same]) and made == [1]
    finally:
        sets.__class__.__getitem__ = real_pristine


def test_the_judge_makes_no_inputs_for_a_float64_run_it_skips():
    """The precision check takes its inputs as a function: a large row whose float64 run is
    skipped makes no copy of its inputs; a small one still runs it."""
    from curate.verify.worker import precision
    model = torch.nn.Identity()
    x = torch.rand(1024)
    asked = []

    def inputs():
        asked.append(1)
        return [x.clone()]
    skipped = precision.precision_profile(model, inputs, [x], [x.clone()], float64_keep_bytes=64,
                                          input_bytes=x.numel() * 4)
    assert "float64_skipped" in skipped and not asked
    ran = precision.precision_profile(model, inputs, [x], [x.clone()],
                                      float64_keep_bytes=1 << 30, input_bytes=x.numel() * 4)
    assert asked == [1] and "err_vs_float64" in ran


def test_a_batch_keeps_its_last_output_itself_unless_it_lies_in_the_inputs():
    """Kept outputs are copies, but the batch's last is kept as it is (no call allocates after
    it): one output's size less at the worker's peak. An output in the inputs' own memory is
    copied (the next call writes there)."""
    from curate.verify.worker.calls import CallRunner
    returned = []

    def fresh(x):
        returned.append(x * 2)
        return returned[-1]

    def in_place(x):
        return x.mul_(2)

    sets = [[torch.randn(8)], [torch.randn(8)]]
    batch = CallRunner(fresh, sets, "cpu", timers=_Timers()).run([(0, 1.0), (1, 1.0)], keep=True)
    (a, _), (b, _) = batch.outputs
    assert a[0].data_ptr() != returned[0].data_ptr()
    assert b[0].data_ptr() == returned[1].data_ptr()
    runner = CallRunner(in_place, sets, "cpu", timers=_Timers())
    (c, _), = runner.run([(0, 1.0)], keep=True).outputs
    assert c[0].data_ptr() != runner.bufs[0].data_ptr() and torch.equal(c[0], sets[0][0] * 2)


class _Timers:
    perf_counter = staticmethod(__import__("time").perf_counter)


def test_digest_is_the_same_in_a_fresh_process():
    """No per-process hash seed: the candidate's worker and the judge agree."""
    code = ("import torch\nfrom curate.verify.worker.digest import digest\n"
            "g = torch.Generator().manual_seed(1)\n"
            "print(digest([torch.randn(100, generator=g), None, torch.arange(5)]))\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "PYTHONHASHSEED": "123"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120, check=True)
    g = torch.Generator().manual_seed(1)
    assert int(out.stdout) == digest([torch.randn(100, generator=g), None, torch.arange(5)])


WATCH_BATCH = """
import collections, json, os, sys
from pathlib import Path
from curate.verify import messages as m
from curate.verify.worker import main
from curate.verify.worker.gates.audit import _WATCHED
fix, device, kernel, ref = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
main.setup()
def ask(msg):
    return m.decode(main.handle(m.encode(msg)), expect=m.REPLIES)
loaded = ask(m.Load(role="candidate", device=device, kernel_code=(fix / kernel).read_text(),
                    pytorch_code=(fix / ref).read_text(), seed_init=3,
                    seeds=[11, 12], poke=5, tag="t", gates=True))
assert isinstance(loaded, m.Loaded), loaded
ask(m.Calls(calls=[[0, 1.0], [1, 1.0]], check=2, keep=True))
seen, on = collections.Counter(), [False]
sys.addaudithook(lambda ev, args: on[0] and ev in _WATCHED and seen.update([ev]))
on[0] = True
batch = ask(m.Calls(calls=[[k % 2, 1.0] for k in range(16)], timed=True, keep=True))
on[0] = False
assert isinstance(batch, m.Batch) and len(batch.ms) == 16, batch
print(json.dumps(dict(seen)))
"""


def _watched_events(tmp_path, device: str, kernel: str, ref: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    out = subprocess.run([sys.executable, "-c", WATCH_BATCH, str(FIX), device, kernel, ref],
                         capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["triton_gelu_residual.py", "cuda_fused_gelu.py"])
def test_a_gpu_timed_batch_raises_no_event_the_audit_hook_walks_the_stack_for(tmp_path,
                                                                             kernel):
    """The GPU's own harness steps (persisting L2 reset, flush, events, synchronizations)
    and Triton's and a CUDA extension's launches: no watched event either."""
    assert _watched_events(tmp_path, "cuda", kernel, "ref_gelu_residual.py") == {}


def test_a_timed_batch_raises_no_event_the_candidates_audit_hook_walks_the_stack_for(tmp_path):
    """Every watched audit event in the candidate's worker costs a walk of the stack, inside
    the parent's clock when it happens in a timed batch, and the judge pays none: the parent
    then charges it to the candidate's kernel. The request's own handling (decoding a message
    compiled its type hints again: `compile` and `exec`; the extensions folder set again:
    `os.putenv`) raised 78 such events a batch; the harness may raise none."""
    assert _watched_events(tmp_path, "cpu", "cpp_honest.py", "ref_scale_add.py") == {}


# -- the pieces, moved from tests/test_verify.py ------------------------------------------------
def test_compare_checks_shapes_dtypes_nan_and_tolerance():
    r = torch.randn(8, 8)
    assert compare([r], [r + 1e-5]).ok
    assert not compare([r], [r + 1e-2]).ok
    assert "shape_mismatch" in compare([r], [r[:4]]).reasons
    assert "dtype_mismatch" in compare([r], [r.double()]).reasons
    bad = r.clone()
    bad[0, 0] = float("inf")
    assert "nan_inf" in compare([r], [bad]).reasons
    nan_ref = r.clone()
    nan_ref[1, 1] = float("nan")
    assert compare([nan_ref], [nan_ref.clone()]).ok  # NaN where the reference has NaN is fine
    assert compare([r.half()], [(r * (1 + 2e-3)).half()]).ok  # half precision: a wider band
    assert compare([r], [r * (1 + 3e-4)]).ok  # TF32-sized noise passes in float32
    assert not compare([r], [r * (1 + 2e-2)]).ok
    assert not compare([torch.arange(4)], [torch.arange(4) + 1]).ok
    # a relative-norm bound catches a small bias spread over every element, inside the
    # elementwise band
    big = torch.full((10000,), 1.0)
    c = compare([big], [big * (1 + 5e-3)])
    assert "output_mismatch" in c.reasons and "relative norm" in c.detail
    items, struct = flatten_outputs((r, (r, 3)))
    assert struct == "tuple[2]" and len(items) == 3


def test_the_finite_pass_gives_the_exact_passes_figures(monkeypatch):
    """The comparison's fast pass (every value finite) and the exact one agree on the counts
    and the worst errors, across chunks and dtypes; a non-finite value or a norm past float32's
    range goes to the exact pass."""
    from curate.verify.worker import compare as cmp
    monkeypatch.setattr(cmp, "CHUNK", 1000)   # several chunks, one partial
    g = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64):
        r = (torch.randn(4321, generator=g) * 3).to(dtype)
        noise = torch.randn(4321, generator=g) * torch.rand(4321, generator=g) * 0.05
        x = (r.double() * (1 + noise)).to(dtype)
        atol, rtol, _ = cmp.tolerance(dtype)
        fast, exact = cmp._finite_errors(r, x, atol, rtol), cmp._exact_errors(r, x, atol, rtol)
        assert fast[:5] == exact[:5], (dtype, fast, exact)   # counts and worst errors
        assert fast[0] > 0                                     # some elements outside the band
        assert fast[5:] == pytest.approx(exact[5:], rel=1e-5)  # the squared norms
    r = torch.randn(3000, generator=g)
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = r.clone()
        x[2500] = bad
        assert cmp._finite_errors(r, x, 1e-2, 1e-2) is None
        assert cmp._finite_errors(x, r, 1e-2, 1e-2) is None
    huge = torch.full((10,), 3e19)    # finite, but its square is not in float32
    assert cmp._finite_errors(huge, huge, 1e-2, 1e-2) is None
    assert compare([huge], [huge]).ok and not compare([huge], [huge * 1.1]).ok


def test_output_descriptions_from_the_candidate_are_checked():
    """The judge opens only what the transports' senders write: a forged description is
    refused before it reaches CUDA, and a view past its storage is refused."""
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    desc = transport.send_inline([x, None])
    got = transport.receive(desc, "cpu", [], "inline")
    assert torch.equal(got[0], x) and got[1] is None
    good = {"kind": "cuda", "dtype": "float32", "shape": [3, 4], "stride": [4, 1], "offset": 0,
            "device": 0, "handle": "00", "size": 48, "soffset": 0,
            "rc_handle": b"/torch_1_2".hex(), "rc_offset": 0, "event": "", "event_sync": False}
    forged = [{"dtype": "object"}, {"shape": [3, -1]}, {"stride": [4]}, {"handle": "zz"},
              {"rc_handle": b"../../etc/passwd".hex()}, {"device": True}, {"size": "48"}]
    for change in forged:
        with pytest.raises(ValueError):
            transport.receive({"transport": "cuda_ipc", "items": [{**good, **change}]}, "cpu",
                              [], "cuda_ipc")
    with pytest.raises(ValueError):
        transport.receive({"transport": "pickle", "items": []}, "cpu", [], "pickle")
    with pytest.raises(ValueError):
        transport.receive({"transport": "cuda_ipc", "items": [{"kind": "exec"}]}, "cpu", [],
                          "cuda_ipc")
    # the old `files` way is gone, and a description is read only as the kind asked for
    with pytest.raises(ValueError):
        transport.receive({"transport": "files", "path": "/etc/passwd"}, "cpu", [], "files")
    with pytest.raises(ValueError, match="was asked for"):
        transport.receive(desc, "cpu", [], "memfd")
    transport.check_bounds([3, 4], [4, 1], 0, torch.float32, 48)
    for shape, stride, off, nbytes in (([3, 4], [4, 1], 1, 48), ([4, 4], [4, 1], 0, 48),
                                       ([3, 4], [1, 4], 0, 40)):
        with pytest.raises(ValueError):
            transport.check_bounds(shape, stride, off, torch.float32, nbytes)
    transport.check_bounds([0, 4], [4, 1], 0, torch.float32, 0)  # empty views fit anywhere


def test_outputs_travel_in_sealed_memory_files(monkeypatch):
    """The bytes of every output, across files of at most MEMFD_CHUNK bytes, come back as they
    went (dtypes, empty and 0-d tensors, None); a description that does not fit its files, or
    a file that is still writable, is refused."""
    import fcntl
    monkeypatch.setattr(transport, "MEMFD_CHUNK", 100)  # outputs that span several files
    items = [torch.arange(60, dtype=torch.float32).reshape(3, 20), None,
             torch.tensor([True, False, True]), torch.tensor(7, dtype=torch.int64),
             torch.empty(0, 4, dtype=torch.float16), torch.randn(5, 3, dtype=torch.float64).t()]
    desc, fds = transport.send_memfd(items)
    try:
        assert len(fds) == -(-desc["size"] // 100) > 2
        got = transport.receive(desc, "cpu", fds, "memfd")
        assert got[1] is None and len(got) == len(items)
        for a, b in zip(items, got):
            if a is not None:
                assert b.dtype == a.dtype and b.shape == a.shape and torch.equal(a, b)
        assert digest(got) == digest(items)
        for change in ({"size": desc["size"] + 1}, {"chunk": 50},
                       {"items": [{**desc["items"][0], "nbytes": 4}]},
                       {"items": [{**desc["items"][0], "offset": desc["size"]}]}):
            with pytest.raises(ValueError):
                transport.receive({**desc, **change}, "cpu", fds, "memfd")
        with pytest.raises(ValueError):
            transport.receive(desc, "cpu", fds[:-1], "memfd")
    finally:
        for fd in fds:
            os.close(fd)
    # over the 256 MiB that one message may hold (base64 inside JSON could not carry it)
    monkeypatch.setattr(transport, "MEMFD_CHUNK", 128 << 20)
    big = torch.zeros(70 << 20, dtype=torch.float32)
    big[-1] = 3.0
    desc, fds = transport.send_memfd([big])
    try:
        assert len(fds) == 3 and desc["size"] == big.numel() * 4
        (back,) = transport.receive(desc, "cpu", fds, "memfd")
        assert back.shape == big.shape and float(back[-1]) == 3.0 and float(back.sum()) == 3.0
    finally:
        for fd in fds:
            os.close(fd)
    del big, back
    fd = os.memfd_create("open", os.MFD_ALLOW_SEALING)
    os.write(fd, b"\0" * 12)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    open_desc = {"transport": "memfd", "size": 12, "chunk": 100,
                 "items": [{"kind": "tensor", "dtype": "float32", "shape": [3], "offset": 0,
                            "nbytes": 12}]}
    try:
        with pytest.raises(ValueError, match="writable"):
            transport.receive(open_desc, "cpu", [fd], "memfd")
    finally:
        os.close(fd)


def test_device_memory_descriptions_that_do_not_match_their_descriptors_are_refused():
    """cuda_fd's checks made before the driver is asked (so they hold on a machine without a
    GPU too): an allocation announced with no descriptor, or with two, or descriptors sent
    beside an empty one."""
    spec = [{"kind": "tensor", "dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}]
    r, w = os.pipe()
    try:
        for desc, fds in (({"transport": "cuda_fd", "size": 2 << 20, "bytes": 16,
                            "items": spec}, []),
                          ({"transport": "cuda_fd", "size": 2 << 20, "bytes": 16,
                            "items": spec}, [r, w]),
                          ({"transport": "cuda_fd", "size": 0, "items": []}, [r])):
            with pytest.raises(ValueError, match="does not match"):
                transport.receive(desc, "cpu", fds, "cuda_fd")
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.gpu
def test_device_memory_passes_by_descriptor_and_forgeries_are_refused():
    """cuda_fd in one process: outputs of several dtypes (and an empty one) come back equal
    from the descriptor; a descriptor of a smaller allocation than described, and a memory
    file posing as device memory, are refused (ValueError: `outputs_unreadable`)."""
    from curate.isolation.protocol import sealed_memfd
    items = [torch.randn(1000, 3, device="cuda"), None,
             torch.arange(77, device="cuda", dtype=torch.int64),
             torch.empty(0, 4, device="cuda", dtype=torch.float16)]
    desc, fds = transport.send_cuda_fd(items)
    try:
        assert desc["transport"] == "cuda_fd" and len(fds) == 1
        got = transport.receive(desc, "cuda", fds, "cuda_fd")
        assert got[1] is None and all(torch.equal(a, b) for a, b in
                                      zip([items[0], items[2], items[3]], [got[0], got[2], got[3]]))
        assert digest(got) == digest(items)   # on the GPU, as on the CPU
        assert digest([x.cpu() if x is not None else x for x in items]) == digest(items)
        with pytest.raises(ValueError):
            transport.receive({**desc, "size": desc["size"] * 4}, "cuda", fds, "cuda_fd")
        assert transport.held_bytes() >= desc["size"]  # kept until the judge is done
        assert transport.release() == 1 and transport.held_bytes() == 0
    finally:
        for fd in fds:
            os.close(fd)
    fake = sealed_memfd("fake", desc["size"], lambda m: None)
    try:
        with pytest.raises(ValueError):
            transport.receive(desc, "cuda", [fake], "cuda_fd")
    finally:
        os.close(fake)


def test_meta_sizes_come_from_the_reference_shapes():
    """The reference's sizes from meta tensors (moved from the warm-up test of test_verify)."""
    from curate.verify.worker.compile import meta_sizes
    ref = (FIX / "ref_gelu_residual.py").read_text()
    sizes = meta_sizes(ref, "t")
    assert sizes and sizes["inputs"] > 0 and sizes["outputs"] > 0
    assert meta_sizes("import torch\nclass Model(torch.nn.Module):\n    pass\n", "t") is None


def test_torch_own_lazy_patching_is_not_taken_for_tampering(tmp_path):
    """torch._dynamo wraps torch.manual_seed when first imported (every inductor candidate
    imports it): a worker must not be replaced for that, but still for a candidate's patch."""
    code = (
        "import torch\n"
        "from curate.verify.worker import main, session\n"
        "main.setup()\n"
        "import torch._dynamo, torch._inductor.runtime.triton_heuristics\n"
        "print('clean', session.tampered_library(), session.tampered_harness())\n"
        "torch.manual_seed = lambda s: None\n"
        "print('patched', session.tampered_library())\n"
        "from curate.verify.worker import calls\n"
        "calls.plain_outputs = lambda items: None\n"
        "print('harness', session.tampered_harness())\n")
    env = {**os.environ, "CURATE_VERIFY_DEVICE": "cpu",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert "clean [] []" in lines
    assert "patched ['torch.manual_seed']" in lines
    assert "harness ['calls.plain_outputs']" in lines


def test_a_worker_gives_device_memory_back_after_each_task(monkeypatch):
    """What an idle worker keeps is invisible to the parent's memory gate: after a task its
    cached blocks are emptied, and a worker still holding more than it exported (beyond 1 GiB)
    asks to be replaced. The CUDA calls are stood in for: CI has no GPU."""
    from curate.verify.worker import memory
    state = {"reserved": 3 << 30, "emptied": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: state.__setitem__(
        "emptied", state["emptied"] + 1))
    monkeypatch.setattr(torch.cuda, "ipc_collect", lambda: None)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: state["reserved"])
    monkeypatch.setattr(transport, "held_bytes", lambda: 0)
    res = memory.release_device_memory(m.Compiled())
    assert state["emptied"] == 1 and res.recycle and res.memory_kept_gb == 3.0
    assert m.encode(res)["_recycle"] is True   # where the isolation pool reads it
    monkeypatch.setattr(transport, "held_bytes", lambda: 5 << 29)   # outputs not yet released
    assert not memory.release_device_memory(m.Finished()).recycle
    monkeypatch.setattr(transport, "held_bytes", lambda: 0)
    kept = memory.release_device_memory(m.Finished(), keep_gb=None)  # report only
    assert not kept.recycle and kept.memory_kept_gb == 3.0
    assert memory.release_device_memory(m.Finished(), keep_gb=4.0).memory_kept_gb == 3.0
    assert not memory.release_device_memory(m.Finished(), keep_gb=4.0).recycle
    state["reserved"] = 100 << 20
    assert not memory.release_device_memory(m.Finished()).recycle


def test_what_held_a_workers_peak_is_read_from_the_allocators_trace():
    """benchmarks only (CURATE_MEMORY_TRACE=1): from an allocator trace, the moment the most
    bytes were allocated and which lines of curate held them then, a block freed before the
    peak left out and blocks older than the trace counted as `before`."""
    from curate.verify.worker import memory
    gib = 2**30

    def at(path, line, name):
        return {"filename": path, "line": line, "name": name}
    ours = at("/x/curate/verify/worker/calls.py", 270, "_kept")
    recv = at("/x/curate/verify/worker/transport.py", 178, "_open_cuda_fd")
    ref = at("/tmp/curate_ref_1.py", 12, "forward")
    torch_frame = at("/x/torch/nn/functional.py", 5, "relu")
    events = [
        {"action": "alloc", "addr": 1, "size": 2 * gib, "frames": [torch_frame, ref, ours]},
        {"action": "alloc", "addr": 2, "size": 3 * gib, "frames": [recv]},
        {"action": "free_requested", "addr": 2, "size": 3 * gib},
        {"action": "alloc", "addr": 3, "size": 1 * gib, "frames": [recv]},
        {"action": "alloc", "addr": 4, "size": 4 * gib, "frames": [recv]},
        {"action": "free_requested", "addr": 99, "size": 1 * gib},   # older than the trace
        {"action": "free_requested", "addr": 4, "size": 4 * gib},
        {"action": "alloc", "addr": 5, "size": 4 * gib, "frames": []},
    ]
    got = memory.holders_at_peak(events, start_bytes=1 * gib)
    assert got["peak_gb"] == 8.0 and got["before_gb"] == 1.0   # 1 + 2 + 1 + 4
    assert got["held_gb"] == {"transport.py:178 _open_cuda_fd": 5.0,
                              "calls.py:270 _kept < curate_ref_1.py:12 forward": 2.0}
    assert got["rest_gb"] == 0.0


def test_the_poked_set_moves_one_element_of_each_float_tensor_the_same_way_everywhere():
    from curate.verify.worker.calls import poked
    base = [torch.randn(4, 6), torch.arange(5), 3.0, torch.randn(6, 4).t(), torch.randn(1)]
    a, b = poked(base, 11), poked(base, 11)
    for x, y, z in zip(base, a, b):
        if isinstance(x, torch.Tensor):
            assert torch.equal(y, z) and y.shape == x.shape and y.stride() == x.stride()
    assert sum(int((y != x).sum()) for x, y in zip(base[:1] + base[3:4], a[:1] + a[3:4])) == 2
    assert a[1] is base[1] and a[2] == 3.0 and a[4] is base[4]  # integers, plain values, 1 elem
    assert not torch.equal(poked(base, 12)[0], a[0]) or not torch.equal(poked(base, 12)[3], a[3])


def test_the_worker_side_imports_nothing_of_the_parent():
    """verify.worker imports only itself, the shared messages/findings/errors, the isolation
    worker and program loader (and the Triton interpreter's patch at setup)."""
    import ast
    allowed = ("curate.verify.worker", "curate.verify.messages", "curate.verify.findings",
               "curate.verify.errors", "curate.isolation.worker", "curate.isolation.program",
               "curate.isolation.protocol", "curate.synth.interpret")
    root = Path(__file__).resolve().parents[1] / "curate" / "verify" / "worker"
    for path in root.rglob("*.py"):
        pkg = ["curate", "verify", "worker", *path.parent.relative_to(root).parts]
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                base = pkg[:len(pkg) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [f"{mod}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.Call) and isinstance(node.args[0] if node.args else None,
                                                           ast.Constant):
                if getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
                    names = [node.args[0].value]
            for name in names:
                if name.startswith("curate"):
                    assert name.startswith(allowed), (path.name, name)


GPU = pytest.mark.gpu


@pytest.mark.parametrize("device, way", [("cpu", "memfd"), pytest.param("cuda", "cuda_fd", marks=GPU),
                                         pytest.param("cuda", "cuda_ipc", marks=GPU),
                                         pytest.param("cuda", "memfd", marks=GPU)])
def test_outputs_pass_between_two_real_workers(tmp_path, device, way):
    """The handler served by curate.isolation's workers: the candidate's outputs leave with its
    reply (sealed memory files, device memory by descriptor or CUDA IPC handles), reach the
    judge with the Compare request, and compare equal with the digest committed to; the same
    description read as another transport is refused."""
    from curate.isolation import WorkerPool
    kw = dict(setup="curate.verify.worker.main:setup", workers=1, timeout=300,
              env={"CURATE_VERIFY_DEVICE": device}, scratch_root=str(tmp_path))
    handler = "curate.verify.worker.main:handle"
    with WorkerPool(handler, **kw) as cands, WorkerPool(handler, **kw) as judges, \
            cands.hold() as cand, judges.hold() as judge:
        def call(w, msg, **fd_kw):
            res = w.call(m.encode(msg), **fd_kw)
            assert res.ok, (res.status, res.error, res.output[-2000:])
            return m.decode(res.value, expect=m.REPLIES), res.fds

        if device == "cuda":
            assert call(cand, m.ProbeCuda())[0].status == "ok"
        load_kw = dict(device=device, pytorch_code=REF, seed_init=3, seeds=[11, 12], poke=5,
                       tag="t", gates=False)
        assert isinstance(call(cand, m.Load(role="candidate", kernel_code=HONEST, **load_kw))[0],
                          m.Loaded)
        committed = call(cand, m.Calls(calls=CALLS, check=1, timed=True))[0].digests
        out, fds = call(cand, m.Fetch(index=0, transport=way), accept_fds=True)
        try:
            assert out.outputs["transport"] == way and out.digest == committed[0]
            assert bool(fds) == (way != "cuda_ipc")
            assert isinstance(call(judge, m.Load(role="judge", **load_kw))[0], m.Loaded)
            call(judge, m.Reference(calls=CALLS[:1]))
            again = call(judge, m.Calls(calls=CALLS[:1], timed=True))[0].digests
            assert again == committed[:1]   # the same bits
            base = dict(call=CALLS[0], outputs=out.outputs, structure=out.structure)
            wrong_way = call(judge, m.Compare(transport="inline", **base), fds=fds)[0]
            got = call(judge, m.Compare(transport=way, digest=committed[0], **base),
                       fds=fds)[0]
        finally:
            for fd in fds:
                os.close(fd)
        assert got.ok, got
        assert not wrong_way.ok and "outputs_unreadable" in [f.reason for f in wrong_way.findings]
        assert isinstance(call(cand, m.Release())[0], m.Released)


def test_bitwise_sameness_holds_nan_positions_chunk_by_chunk(monkeypatch):
    """The gates' `same` compares chunk by chunk where values differ (no full-size temporaries
    for multi-GiB outputs): NaN equals NaN at the same position, and one element off is seen
    in any chunk."""
    from curate.verify.worker import compare
    from curate.verify.worker.gates import state
    monkeypatch.setattr(compare, "CHUNK", 5)
    a = torch.randn(23)
    a[3] = a[17] = float("nan")
    assert state.same(a, a.clone())
    moved = a.clone()
    moved[17] = 0.0
    assert not state.same(a, moved)
    off = a.clone()
    off[21] += 1.0
    assert not state.same(a, off) and not state.same(a, a[:22])
    assert state.same(torch.arange(5), torch.arange(5))
    assert not state.same(torch.arange(5), torch.arange(5) + 1)


def test_precision_readings_are_the_same_a_chunk_at_a_time(monkeypatch):
    """The judge's float64 error and half-precision share are read a chunk at a time (no
    float64 copy of a whole multi-GiB output): the same figures as over the whole tensors."""
    from curate.verify.worker import compare, precision
    a = torch.randn(300, 7)
    b = a + 1e-3 * torch.randn_like(a)
    whole = float(torch.linalg.vector_norm(a.double() - b.double()) /
                  torch.linalg.vector_norm(b.double()))
    half = torch.randn(4000).half().float()
    half[:500] = 0.0
    monkeypatch.setattr(compare, "CHUNK", 97)
    assert precision._relnorm(a, b) == pytest.approx(whole, rel=1e-9)
    assert precision._half_representable(half) == 1.0
    assert precision._half_representable(torch.randn(4000)) < 0.01
    assert precision._half_representable(torch.zeros(1000)) == 0.0


def test_precision_float64_reading_consumes_its_inputs_and_has_a_memory_limit():
    """The float64 run takes the float32 inputs' place (the list given is emptied), and is
    skipped, saying so, where its float64 copies would pass the limit; the half-precision
    reading still runs then."""
    from curate.verify.messages import FLOAT64_KEEP_FACTOR
    from curate.verify.worker import precision
    model = torch.nn.Linear(16, 16)
    x = torch.randn(64, 16)
    with torch.no_grad():
        ref = [model(x)]
    half = [ref[0].half().float()]
    inputs = [x.clone()]
    got = precision.precision_profile(model, inputs, ref, half)
    assert inputs == [] and got["err_vs_float64"]["candidate"] > 5e-5
    assert got["reduced_precision"] and got["below_float32"]
    need = 2 * (x.numel() + ref[0].numel()) * 4
    small = precision.precision_profile(model, [x.clone()], ref, half,
                                        float64_keep_bytes=(need - 1) / FLOAT64_KEEP_FACTOR)
    assert "err_vs_float64" not in small and "float64 copies" in small["float64_skipped"]
    assert small["reduced_precision"]
    assert "float64_skipped" not in precision.precision_profile(
        model, [x.clone()], ref, half, float64_keep_bytes=need / FLOAT64_KEEP_FACTOR)


def test_closeness_is_read_chunk_by_chunk(monkeypatch):
    from curate.verify.worker import compare
    from curate.verify.worker.gates import state
    monkeypatch.setattr(compare, "CHUNK", 4)
    a = torch.randn(19)
    assert state.close(a, a + 1e-6) and not state.close(a, a[:18])
    far = a.clone()
    far[18] += 1.0
    assert not state.close(a, far)


def test_a_fetch_between_timed_rounds_keeps_the_allocator_cache(monkeypatch):
    """Releasing an earlier export at a fetch must not empty torch's cache: the next timed
    batch would then allocate from the driver inside the clock, which the judge never does.
    The Release request (a worker going idle) still empties it."""
    emptied = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    transport._HELD.append(torch.zeros(4))
    assert transport.release(empty_cache=False) == 1 and emptied == []
    transport._HELD.append(torch.zeros(4))
    assert transport.release() == 1 and emptied == [1]
