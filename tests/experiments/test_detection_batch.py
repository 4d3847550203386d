"""One detection batch's values (vrh.experiments.detection_batch): the query kinds come from one declaration
each (the query sets' fields, each extra pass's entry), and a batch's state round-trips through the run
folder and joins in order (the batches themselves run in tests/experiments/test_detection.py)."""

from types import SimpleNamespace

import torch

from vrh import runs
from vrh.experiments.detection_batch import EXTRA_PASSES, BatchState
from vrh.models.queries import QuerySets
from vrh.scoring.functions import QUERY_KINDS


def test_query_kinds_are_declared_once_by_the_query_sets_and_the_extra_passes():
    """SampleInfo.queries gets the QuerySets' kinds (named by their fields) and each extra pass's own kinds,
    and together they are the kinds the scorers know (QUERY_KINDS), each from one place."""
    declared = [*QuerySets.kinds(), *(k for p in EXTRA_PASSES.values() for k in p.query_kinds)]
    assert sorted(declared) == sorted(QUERY_KINDS) and len(set(declared)) == len(declared)
    t = torch.tensor
    qs = QuerySets(t([7, 8, 9]), out=t([1, 2]), in_=t([0]), coord=t([2]), last_prompt=t([1]), out_own=t([2]))
    assert list(qs.as_query_dict()) == list(QuerySets.kinds())
    for p in EXTRA_PASSES.values():  # a pass adds exactly the kinds it declares
        cap = SimpleNamespace(queries=[qs], batch=SimpleNamespace(visual_positions=[t([4, 5, 6])]))
        added = p.sample_fields(cap, 0, t([True, False, True]))
        assert sorted(added["queries"]) == sorted(p.query_kinds)
    assert added["null_key_positions"].tolist() == [4, 6]


def test_batch_state_round_trips_through_the_run_folder_and_joins_in_order(tmp_path):
    def state(i, n_scores, skipped=()):
        return BatchState([f"s{i}"], [{"id": f"s{i}"}], list(skipped), {"main": 1, "batches": 1, "null_query": i},
                          {"x": {"lists": {"_scores": [torch.full((2, 2), float(i))] * n_scores},
                                 "counters": {"n_empty_keys": i}}},
                          {f"s{i}": (torch.rand(2, 2, 3), torch.rand(3, 4))} if n_scores else {})

    a, b = state(0, 1), state(1, 0, [{"id": "s1", "reason": "empty answer"}])
    runs.write_batch_state(tmp_path, 0, a.to_state())  # a plain dict: read back with weights_only=True
    back = BatchState.from_state(runs.read_batch_states(tmp_path)[0])
    assert (back.ids, back.records, back.skipped, back.forwards) == (a.ids, a.records, a.skipped, a.forwards)
    assert torch.equal(back.scorers["x"]["lists"]["_scores"][0], a.scorers["x"]["lists"]["_scores"][0])
    assert all(torch.equal(x, y) for x, y in zip(back.overlays["s0"], a.overlays["s0"]))
    joined = BatchState.join([a, b])
    assert joined.ids == ["s0", "s1"] and joined.skipped == b.skipped and list(joined.overlays) == ["s0"]
    assert joined.forwards == {"main": 2, "batches": 2, "null_query": 1}
    assert joined.scorers["x"]["counters"] == {"n_empty_keys": 1} and len(joined.scorers["x"]["lists"]["_scores"]) == 1
    assert len(a.scorers["x"]["lists"]["_scores"]) == 1 and a.ids == ["s0"]  # the pieces are left as they were
    assert BatchState.join([BatchState.empty(["null_query"])]).forwards == {"main": 0, "batches": 0, "null_query": 0}
