"""The issues' performance bars, checked against a bench run's rows.

Each bar names a (suite, case) row pair and the speedup modulekit must reach over a peer
(peer time / modulekit time): "<= 0.5x the peer's time" is a speedup of at least 2.
"""

from __future__ import annotations

# (issue, what the issue asks, suite, case, peer impl, minimum speedup)
BARS = [
    (2, "Identity call overhead <= 0.5x torch's", "overhead", "Identity call", "torch", 2.0),
    (6, "safetensors load to first use >= 5x safetensors.numpy.load_file",
     "checkpoint_io", "load safetensors 200 MB, to first use", "safetensors.numpy.load_file",
     5.0),
    (6, ".pt load no slower than torch.load(weights_only=True)",
     "checkpoint_io", "load pt-zip 200 MB, to first use", "torch.load(weights_only=True)", 1.0),
]


def check_bars(rows):
    """One dict per bar whose rows are present: measured speedup and whether it is met."""
    index = {(r.get("suite"), r.get("case"), r.get("impl")): r for r in rows}
    out = []
    for issue, text, suite, case, peer, need in BARS:
        row = index.get((suite, case, peer))
        if row is None or not row.get("speedup"):
            continue
        out.append({"issue": issue, "bar": text, "suite": suite, "case": case, "peer": peer,
                    "needed": need, "speedup": row["speedup"], "met": row["speedup"] >= need})
    return out


def format_bars(bars):
    return "\n".join(
        f"  [{'met' if b['met'] else 'MISSED'}] #{b['issue']} {b['bar']}: "
        f"{b['speedup']:.2f}x (needs >= {b['needed']:.2f}x)"
        for b in bars
    )
