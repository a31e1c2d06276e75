"""Conversation turns against their definition: each turn draws its new tokens, then (a
forked turn) its whole output, then the output the next prompt carries, one draw each."""

from __future__ import annotations

import random
from array import array

from hypothesis import given
from hypothesis import strategies as st

from hicache.workload.conversation import Conversation
from hicache.workload.tokens import draw_tokens

turns = st.lists(st.tuples(st.integers(0, 150), st.integers(0, 80), st.integers(0, 80)),
                 min_size=1, max_size=6)


@given(seed=st.integers(0, 2**32), ns=st.integers(0, 1000), prefix=st.integers(0, 100),
       spec=turns)
def test_turns_match_one_draw_per_part(seed, ns, prefix, spec):
    system = draw_tokens(random.Random(-1), 0, prefix)
    conv = Conversation(random.Random(seed), ns, system)
    ref, buf = random.Random(seed), array("q", system)
    for new, out, drop in spec:
        drop = min(drop, out)
        prompt = conv.turn(new, out, drop)
        buf.extend(draw_tokens(ref, ns, new))
        want_prompt = buf[:]
        if drop:
            want_full = want_prompt + draw_tokens(ref, ns, out)
            buf.extend(draw_tokens(ref, ns, out - drop))
        else:
            buf.extend(draw_tokens(ref, ns, out))
            want_full = buf[:]
        assert prompt[:] == want_prompt and len(prompt) == len(want_prompt)
        full = conv.with_output(prompt, out)
        assert full[:] == want_full and len(full) == len(want_full)
        assert len(conv) == len(buf) and conv.turns
    assert conv._rng.getstate() == ref.getstate()  # the stream goes on where it would
