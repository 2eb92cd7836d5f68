#!/usr/bin/env bash
# End-to-end check of `tinyscale bench ep` (label app) on a shrunken moe-tiny layer: the table has
# the rows ep = 1 and 2, each with balanced (skew 0) and skewed (skew 2) routing; in the JSON every
# rank's counted bytes equal what its rows imply (forward: dispatch rows to other ranks and the
# combine rows sent back; backward: both again), the rows one rank sends are the rows its peer
# receives, skewed routing loads the experts less evenly, and under skew one rank's experts
# receive nothing while it still takes part in every all-to-all.
# Times are not checked: one step on a shared CPU is noise. Usage: bench_ep.sh TINYSCALE SRC
set -euo pipefail
bin=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "bench_ep: $*" >&2; exit 1; }

"$bin" bench ep --config "$src/configs/moe-tiny.toml" --set model.n_embd=32 \
  --set train.batch_size=4 --set train.seq_len=32 --ranks 1,2 --skew 0,2 --steps 1 --warmup 0 \
  --json "$work/ep.json" > "$work/out.txt" || fail "exit status $?"
for row in "1 | 0" "1 | 2" "2 | 0" "2 | 2"; do
  grep -q "^| $row | " "$work/out.txt" || fail "no row for ep | skew = $row"
done
[ "$(grep -c '^| [0-9]' "$work/out.txt")" -eq 4 ] || fail "expected 4 rows in the table"
grep -q "hardware threads" "$work/out.txt" || fail "no core count line"
grep -q "bytes sent equal the rows' sum on every rank" "$work/out.txt" || fail "bytes check line"
/usr/bin/python3 - "$work/ep.json" <<'PY' || fail "JSON check failed"
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
assert len(rows) == 4, f"expected 4 JSON rows, found {len(rows)}"
by = {(r["ep"], r["skew"]): r for r in rows}
assert set(by) == {(1, 0), (1, 2), (2, 0), (2, 2)}, sorted(by)
for r in rows:
    ep, C, eb, E = r["ep"], r["C"], r["element_bytes"], r["n_experts"]
    assert r["layer_ms"] > 0 and C == 32 and eb == 4, r
    tpe = r["tokens_per_expert"]
    assert len(tpe) == E, tpe
    # every assignment was processed by its expert or dropped over capacity
    assert r["assignments"] == ep * r["tokens_per_rank"] * r["top_k"], r
    assert sum(tpe) + r["dropped"] == r["assignments"], (tpe, r["dropped"], r["assignments"])
    assert max(tpe) <= ep * r["capacity_per_rank"], (tpe, r["capacity_per_rank"])
    assert abs(r["imbalance"] - max(tpe) / (sum(tpe) / E)) < 1e-9, r["imbalance"]
    ranks = r["ranks"]
    assert [l["ep_rank"] for l in ranks] == list(range(ep)), ranks
    sent = []
    for l in ranks:
        i = l["ep_rank"]
        remote = sum(l["rows_sent"][j] + l["rows_received"][j] for j in range(ep) if j != i)
        expected = 2 * remote * C * eb  # forward and backward
        assert l["bytes_sent"] == expected, (ep, r["skew"], i, l["bytes_sent"], expected)
        assert l["bytes_received"] == expected, (ep, r["skew"], i, l["bytes_received"], expected)
        for j in range(ep):  # what rank i sends rank j, rank j receives from rank i
            assert l["rows_sent"][j] == ranks[j]["rows_received"][i], (i, j, ranks)
        sent.append(l["bytes_sent"])
    # summed over ranks: four all-to-alls, each moving the dispatch's remote rows once
    dispatched = sum(l["rows_sent"][j] for l in ranks for j in range(ep) if j != l["ep_rank"])
    assert sum(sent) == 4 * dispatched * C * eb, (sent, dispatched)
    assert r["bytes_sent_max"] == max(sent) and abs(r["bytes_sent_mean"] - sum(sent) / ep) < 1e-6
    if ep == 1:
        assert r["bytes_sent_max"] == 0 and r["bytes_formula_balanced"] == 0, r
    else:
        assert r["bytes_sent_max"] > 0, r
bal, skew = by[(2, 0)], by[(2, 2)]
assert skew["imbalance"] > bal["imbalance"], (skew["imbalance"], bal["imbalance"])
assert skew["dropped_fraction"] > bal["dropped_fraction"], (skew, bal)
# balanced routing moves about the formula's bytes (random routing: within 25% at N = 128)
assert abs(bal["bytes_sent_mean"] / bal["bytes_formula_balanced"] - 1) < 0.25, bal
# skew 2 sends every token to experts 0 and 1, both on rank 0 (contiguous): rank 1's experts
# process nothing, yet it joined every all-to-all (the run finished) and sent its tokens away
idle = skew["ranks"][1]
assert idle["experts"] == [2, 3] and idle["expert_rows"] == [0, 0], idle
assert idle["rows_sent"][0] > 0 and idle["rows_received"] == [0, 0], idle
PY
echo "bench_ep: 4 rows; bytes equal the rows' sum on every rank; skew raises the imbalance"
