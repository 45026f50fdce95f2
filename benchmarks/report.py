"""Summaries, the issue's ratio targets, a markdown report and a PNG plot (drawn with OpenCV).

Figures per contender are medians over the repeats that succeeded (wall, CPU, inner time);
memory figures are the largest seen over the repeats. images/s and MB/s divide the workload's
images and input bytes by the median wall time of the whole process.
"""

from __future__ import annotations

import itertools
import statistics

import cv2
import numpy as np

from benchmarks.measure import SAMPLE_S

# The issues' targets (3 and 12), measured on 2 cores with whole processes.
CIFAR_VS_SEED = 6.0
SMALL_VS_BASELINE = 2.5
SMALL_VS_NAIVE = 1.5
CEILING_SHARE = 0.85
CEILING_SHARE_ONE = 0.95  # at --workers 1
EFFICIENCY = 0.9
EFFICIENCY_JOB_S = 60.0  # the efficiency target holds on jobs of this many seconds of one core
KEEP_VS_BASELINE = 15.0
KEEP_VS_IO_CEILING = 0.8
DEFAULT_VS_ONE = 1.05  # the defaults' wall time over --workers 1's, at most
DEFAULT_VS_BEST = 1.10  # ... and over the best --workers'
HELP_S = 0.2
SMALL_PACK_S = 0.5
LISTING_FILES_PER_S = 200_000
LISTING_PEAK_MB = 500
MEMORY_FLAT = 1.10  # a worker's peak private memory may grow this much with 10x the images


def summarize(runs: list[dict], images: int, input_mb: float) -> dict:
    """Median figures over the successful runs of one contender on one case."""
    good = [r for r in runs if r["ok"]]
    summary: dict = {"repeats": len(good), "failed": len(runs) - len(good)}
    if not good:
        summary["error"] = runs[-1].get("error", "failed") if runs else "not run"
        return summary
    med = statistics.median
    summary.update(
        images=images,
        wall_s=round(med(r["wall_s"] for r in good), 3),
        walls=[round(r["wall_s"], 3) for r in good],
        cpu_s=round(med(r["cpu_s"] for r in good), 3),
        tree_pss_mb=round(max(r["tree_pss_mb"] for r in good), 1),
        maxrss_mb=round(max(r["maxrss_mb"] for r in good), 1),
        parent_rss_mb=round(max(r["parent_rss_mb"] for r in good), 1),
        worker_rss_mb=round(max(r["worker_rss_mb"] for r in good), 1),
        worker_private_mb=round(max(r.get("worker_private_mb", 0) for r in good), 1),
        processes=max(r["processes"] for r in good),
        other_cores=round(statistics.median(r.get("other_cores", 0.0) for r in good), 2),
    )
    inner = [r["inner_s"] for r in good if r.get("inner_s") is not None]
    summary["inner_s"] = round(med(inner), 3) if inner else None
    if good[0]["contender"] == "ceiling":
        per_core = images / med(inner) if inner else 0.0
        summary["per_core_images_per_s"] = round(per_core, 1)
        summary["per_core_mb_per_s"] = round(input_mb * per_core / images, 1) if images else 0.0
    elif good[0]["contender"] == "ceiling-parallel":  # the timed loops alone, like the ceiling
        summary["images_per_s"] = round(images / med(inner), 1) if inner else 0.0
        summary["mb_per_s"] = round(input_mb / med(inner), 1) if inner else 0.0
    else:
        summary["images_per_s"] = round(images / summary["wall_s"], 1)
        summary["mb_per_s"] = round(input_mb / summary["wall_s"], 1)
        outs = [r.get("out_bytes", 0) for r in good]
        summary["out_mb"] = round(max(outs) / 1e6, 1)
        chosen = [r["chosen_workers"] for r in good if r.get("chosen_workers")]
        if chosen:
            summary["chosen_workers"] = max(set(chosen), key=chosen.count)
    return summary


def _get(case: dict, contender_id: str) -> dict | None:
    for c in case["contenders"]:
        if c["id"] == contender_id and c["summary"].get("repeats"):
            return c["summary"]
    return None


def _shardpack_workers(case: dict) -> list[int]:
    return sorted(
        c["workers"]
        for c in case["contenders"]
        if c["kind"] == "shardpack" and c["summary"].get("repeats")
    )


def _workers(n: int) -> str:
    return f"{n} worker" if n == 1 else f"{n} workers"


def _target(
    name: str,
    value: float | None,
    goal: float,
    fmt: str,
    note: str = "",
    most: bool = False,
    spread: str = "",
) -> dict:
    """One target row; `most`: the goal is an upper bound (times, memory), else a lower one;
    `spread`: the value's range over the repeats (_per_repeat), after the note."""
    met = value is not None and (value <= goal if most else value >= goal)
    return {
        "target": name,
        "value": value,
        "goal": goal,
        "met": met,
        "format": fmt,
        "note": "; ".join(filter(None, (note, spread))),
        "most": most,
    }


def _per_repeat(over: dict, under: dict, fmt: str) -> str:
    """Wall over wall of two contenders in each repeat (every contender runs once a repeat, in
    alternating order): how far the machine's noise moves a ratio the row gives as a ratio of
    medians."""
    if over.get("failed") or under.get("failed") or over.get("repeats", 0) < 2:
        return ""
    ratios = [a / b for a, b in zip(over["walls"], under["walls"], strict=True)]
    return f"per repeat {fmt.format(min(ratios))}-{fmt.format(max(ratios))}"


def targets(results: dict) -> list[dict]:
    """The issue's ratio targets that this run's cases can speak to, each met or not."""
    found: list[dict] = []
    for case in results["cases"]:
        workers = _shardpack_workers(case)
        if not workers:
            continue
        top = workers[-1]
        name, encode, kind = case["workload"]["name"], case["encode"], case["workload"]["kind"]
        # The ratio targets are for default options when the run has them.
        best = _get(case, "shardpack@default") or _get(case, f"shardpack@{top}")
        where = f"{name} --encode {encode}, " + (
            "default workers" if _get(case, "shardpack@default") else _workers(top)
        )
        found += _default_targets(case, workers)
        seed = _get(case, "seed-2-scripts")
        if kind == "cifar" and seed:
            ratio = best["images_per_s"] / seed["images_per_s"]
            found.append(
                _target(
                    f"CIFAR end to end vs the two-step CIFAR tutorial ({where})",
                    ratio,
                    CIFAR_VS_SEED,
                    "{:.1f}x",
                    spread=_per_repeat(seed, best, "{:.1f}x"),
                )
            )
        baseline = _get(case, "baseline")
        naive = _get(case, f"naive-parallel@{top}")
        if kind == "folder" and encode == "raw":
            if baseline:
                ratio = best["images_per_s"] / baseline["images_per_s"]
                found.append(
                    _target(
                        f"raw pixels vs the single-writer TFRecordWriter loop ({where})",
                        ratio,
                        SMALL_VS_BASELINE,
                        "{:.2f}x",
                        spread=_per_repeat(baseline, best, "{:.2f}x"),
                    )
                )
            if naive:
                ratio = best["images_per_s"] / naive["images_per_s"]
                found.append(
                    _target(
                        f"raw pixels vs the naive multiprocessing version ({where})",
                        ratio,
                        SMALL_VS_NAIVE,
                        "{:.2f}x",
                        spread=_per_repeat(naive, best, "{:.2f}x"),
                    )
                )
        ceiling = _get(case, "ceiling")
        at_once = next(  # the N-at-once loop, where it ran: what N cores really give
            (c for c in case["contenders"]
             if c["kind"] == "ceiling-parallel" and c["summary"].get("repeats")),
            None,
        )  # fmt: skip
        if encode in ("jpeg", "png", "webp") and ceiling:
            for n in workers:
                run = _get(case, f"shardpack@{n}")
                share = run["images_per_s"] / (ceiling["per_core_images_per_s"] * n)
                note = ""
                if at_once and at_once["workers"] == n:
                    rate = at_once["summary"]["images_per_s"]
                    note = (
                        f"against the {n} loops measured at once "
                        f"({rate / ceiling['per_core_images_per_s']:.2f} times one): "
                        f"{run['images_per_s'] / rate:.2f}"
                    )
                found.append(
                    _target(
                        f"share of the ceiling ({name} --encode {encode}, {_workers(n)})",
                        share,
                        CEILING_SHARE_ONE if n == 1 else CEILING_SHARE,
                        "{:.2f}",
                        note,
                    )
                )
            default = _get(case, "shardpack@default")
            if default:
                chosen = default.get("chosen_workers") or 1
                share = default["images_per_s"] / (ceiling["per_core_images_per_s"] * chosen)
                found.append(
                    _target(
                        f"share of the ceiling ({name} --encode {encode}, default workers)",
                        share,
                        CEILING_SHARE,
                        "{:.2f}",
                        f"the defaults chose {_workers(chosen)}",
                    )
                )
        one = _get(case, "shardpack@1")
        if encode in ("jpeg", "png", "webp") and one and top > 1:
            work = one["wall_s"]  # one core's seconds for the whole job, roughly
            for n in workers[1:]:
                efficiency = _get(case, f"shardpack@{n}")["images_per_s"] / (
                    n * one["images_per_s"]
                )
                note = f"job of {work:.0f} s of one core's work"
                if work < EFFICIENCY_JOB_S:
                    note += f" (the target is set for jobs of {EFFICIENCY_JOB_S:.0f} s or more)"
                found.append(
                    _target(
                        f"parallel efficiency ({name} --encode {encode}, {_workers(n)})",
                        efficiency,
                        EFFICIENCY,
                        "{:.2f}",
                        note,
                    )
                )
        if encode == "keep" and baseline:
            ratio = best["images_per_s"] / baseline["images_per_s"]
            found.append(
                _target(
                    f"passthrough vs the single-writer TFRecordWriter loop ({where})",
                    ratio,
                    KEEP_VS_BASELINE,
                    "{:.1f}x",
                    spread=_per_repeat(baseline, best, "{:.1f}x"),
                )
            )
        io_ceiling = _get(case, "io-ceiling")
        if encode == "keep" and io_ceiling:
            share = io_ceiling["wall_s"] / best["wall_s"]
            fixed = results.get("extras", {}).get("fixed_imports")
            floor = (
                f"; a fresh Python importing typer, numpy and joblib alone (the design's): "
                f"{fixed['wall_s']:.2f} s of shardpack's {best['wall_s']:.2f} s"
                if fixed
                else ""
            )
            found.append(
                _target(
                    f"passthrough against the I/O ceiling ({where})",
                    share,
                    KEEP_VS_IO_CEILING,
                    "{:.2f}",
                    "one process reading, hashing, writing and fsyncing the bytes: "
                    f"{io_ceiling['wall_s']:.2f} s{floor}",
                    spread=_per_repeat(io_ceiling, best, "{:.2f}"),
                )
            )
    extras = results.get("extras", {})
    memory = extras.get("memory")
    if memory and memory.get("ratio") is not None:
        found.append(
            {
                "target": "worker peak private memory flat with 10x the images "
                f"({memory['what']}); a forked worker's RSS also counts the parent's pages "
                "it shares",
                "value": memory["ratio"],
                "goal": MEMORY_FLAT,
                "met": memory["ratio"] <= MEMORY_FLAT,
                "most": True,
                "format": "{:.2f}x",
                "note": f"{memory['small_mb']:.0f} MB -> {memory['large_mb']:.0f} MB; "
                f"RSS {memory['small_rss_mb']:.0f} -> {memory['large_rss_mb']:.0f} MB; "
                f"parent {memory['small_parent_mb']:.0f} -> {memory['large_parent_mb']:.0f} MB",
            }
        )
    startup = extras.get("startup")
    if startup:
        note = (
            f"importing the worker module in a fresh Python: {startup['worker_import_s']:.2f} s; "
            f"TensorFlow imported: {startup['worker_imports_tensorflow']}"
        )
        found.append(
            _target(
                "`shardpack --help` wall time", startup["help_s"], HELP_S, "{:.2f} s", note, True
            )
        )
        if "small_pack_s" in startup:
            found.append(
                _target(
                    f"`shardpack pack` of a {startup['small_pack_images']}-image folder, "
                    "whole process",
                    startup["small_pack_s"],
                    SMALL_PACK_S,
                    "{:.2f} s",
                    most=True,
                )
            )
    listing = extras.get("listing")
    if listing and "files_per_s" in listing:
        what = f"{listing['files']:,} files"
        note = f"scan {listing['scan_s']:.1f} s + plan {listing['plan_s']:.1f} s"
        found.append(
            _target(
                f"listing scale: scan + plan rate ({what})",
                listing["files_per_s"],
                LISTING_FILES_PER_S,
                "{:,.0f} files/s",
                note,
            )
        )
        found.append(
            _target(
                f"listing scale: the parent's peak RSS ({what})",
                listing["peak_rss_mb"],
                LISTING_PEAK_MB,
                "{:.0f} MB",
                most=True,
            )
        )
    return found


def _default_targets(case: dict, workers: list[int]) -> list[dict]:
    """The defaults against --workers 1 and against the best --workers, wall time over wall."""
    default, one = _get(case, "shardpack@default"), _get(case, "shardpack@1")
    if not default or not one:
        return []
    name, encode = case["workload"]["name"], case["encode"]
    chosen = default.get("chosen_workers")
    note = f"the defaults chose {_workers(chosen)}" if chosen else ""
    best_n = min(workers, key=lambda n: _get(case, f"shardpack@{n}")["wall_s"])
    best = _get(case, f"shardpack@{best_n}")
    return [
        _target(
            f"defaults vs --workers 1, wall over wall ({name} --encode {encode})",
            default["wall_s"] / one["wall_s"],
            DEFAULT_VS_ONE,
            "{:.2f}",
            note,
            most=True,
            spread=_per_repeat(default, one, "{:.2f}"),
        ),
        _target(
            f"defaults vs the best --workers ({best_n}), wall over wall ({name} --encode {encode})",
            default["wall_s"] / best["wall_s"],
            DEFAULT_VS_BEST,
            "{:.2f}",
            note,
            most=True,
            spread=_per_repeat(default, best, "{:.2f}"),
        ),
    ]


# ---- markdown ------------------------------------------------------------------------------


def _num(value, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, (int, float)) and abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def _times(ratio: float | None) -> str:
    return "—" if ratio is None else f"{ratio:.2f}x"


def case_table(case: dict) -> list[str]:
    """Markdown rows for one case, the ceiling expanded to every worker count run."""
    baseline = _get(case, "baseline") or _get(case, "seed-2-scripts")
    lines = [
        "| contender | workers | images/s | MB/s | wall s | CPU s | tree PSS MB | largest proc MB "
        "| others' load | vs baseline |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    workers = _shardpack_workers(case) or [1]
    for c in case["contenders"]:
        s = c["summary"]
        if not s.get("repeats"):
            lines.append(
                f"| {c['kind']} | {c['workers']} | failed: "
                f"{s.get('error', '')[:60]!r} | | | | | | | |"
            )
            continue
        if c["kind"] == "ceiling":
            for n in workers:
                rate = s["per_core_images_per_s"] * n
                ratio = rate / baseline["images_per_s"] if baseline else None
                lines.append(
                    f"| ceiling (1 core x {n}) | {n} | {_num(rate, 0)} | "
                    f"{_num(s['per_core_mb_per_s'] * n)} | {_num(s['inner_s'] / n, 2)} | "
                    f"— | {_num(s['tree_pss_mb'], 0)} | {_num(s['maxrss_mb'], 0)} | "
                    f"{_num(s['other_cores'], 2)} | {_times(ratio)} |"
                )
            continue
        if c["kind"] == "ceiling-parallel":
            rate = s["images_per_s"]
            ratio = rate / baseline["images_per_s"] if baseline else None
            lines.append(
                f"| ceiling ({c['workers']} at once, measured) | {c['workers']} | "
                f"{_num(rate, 0)} | {_num(s['mb_per_s'])} | {_num(s['inner_s'], 2)} | — | "
                f"{_num(s['tree_pss_mb'], 0)} | {_num(s['maxrss_mb'], 0)} | "
                f"{_num(s['other_cores'], 2)} | {_times(ratio)} |"
            )
            continue
        ratio = s["images_per_s"] / baseline["images_per_s"] if baseline else None
        shown = c["workers"]
        if c["kind"] == "shardpack-default":
            shown = f"default ({s.get('chosen_workers', '?')})"
        lines.append(
            f"| {c['kind']} | {shown} | {_num(s['images_per_s'], 0)} | "
            f"{_num(s['mb_per_s'])} | {_num(s['wall_s'], 2)} | {_num(s['cpu_s'], 1)} | "
            f"{_num(s['tree_pss_mb'], 0)} | {_num(s['maxrss_mb'], 0)} | "
            f"{_num(s['other_cores'], 2)} | {_times(ratio)} |"
        )
    return lines


def _format(case: dict) -> str:
    """The heading's note of a container other than TFRecord (results before it: TFRecord)."""
    fmt = case.get("format", "tfrecord")
    return "" if fmt == "tfrecord" else f", --format {fmt}"


def markdown(results: dict) -> str:
    """The whole report: machine, one table per case, targets, extras."""
    m = results["machine"]
    lines = [
        f"# shardpack benchmark, {results['started']}",
        "",
        f"`{results['command']}`",
        "",
        f"Machine: {m['cores']} cores ({m['cpu_model']}), {m['memory_gb']} GB; Python "
        f"{m['python']}, numpy {m['numpy']}, OpenCV {m['opencv']}, TensorFlow "
        f"{m['tensorflow']}, joblib {m['joblib']}, shardpack {m['shardpack']}. "
        f"Repeats: {results['repeat']} (median wall; order alternated). Load average at "
        f"start: {m['load_average']}.",
        "",
    ]
    for case in results["cases"]:
        w = case["workload"]
        lines += [
            f"## {w['name']}, --encode {case['encode']}{_format(case)}: "
            f"{w['num_images']:,} images, "
            f"{w['input_mb']} MB in",
            "",
            *case_table(case),
            "",
        ]
    found = targets(results)
    if found:
        lines += [
            "## Targets",
            "",
            "| target | measured | goal | met |",
            "|---|---:|---:|:---:|",
        ]
        for t in found:
            value = "—" if t["value"] is None else t["format"].format(t["value"])
            goal = t["format"].format(t["goal"])
            better = "≤" if t["most"] else "≥"
            note = f"; {t['note']}" if t["note"] else ""
            lines.append(
                f"| {t['target']}{note} | {value} | {better} {goal} | "
                f"{'yes' if t['met'] else '**no**'} |"
            )
        lines.append("")
    lines += [
        "Columns: images/s and MB/s (input bytes) over the whole process's wall time, start-up "
        "included; CPU s: user+system of the process tree; tree PSS MB: peak summed PSS of the "
        f"process tree (sampled every {SAMPLE_S:g} s); largest proc MB: kernel's peak RSS of the "
        "largest single process (wait4); others' load: cores busy with other processes during "
        "the run (from /proc/stat; above ~0.2 the figures are noisy). Ceiling rows: one core's "
        "tight read/decode/encode loop (no start-up, no Example, no writing) times the cores.",
        "",
    ]
    return "\n".join(lines)


# ---- plot ----------------------------------------------------------------------------------

_W, _H = 680, 400  # one panel
_LEGEND = 130  # room on the right for the legend
_LEFT, _RIGHT, _TOP, _BOTTOM = 80, 20, 60, 56
_COLORS = {  # BGR
    "shardpack": (180, 100, 20),
    "ceiling": (110, 110, 110),
    "baseline": (40, 40, 210),
    "seed-2-scripts": (40, 40, 210),
    "baseline-keep": (160, 60, 200),
    "naive-parallel": (20, 150, 240),
}
_FONT = cv2.FONT_HERSHEY_SIMPLEX


def _text(img, text, org, scale=0.45, color=(30, 30, 30), thick=1) -> None:
    cv2.putText(img, text, org, _FONT, scale, color, thick, cv2.LINE_AA)


def _dashed(img, p, q, color, thick=2, dash=10) -> None:
    p, q = np.array(p, float), np.array(q, float)
    length = float(np.hypot(*(q - p)))
    steps = max(1, int(length // dash))
    for i in range(0, steps, 2):
        a = p + (q - p) * i / steps
        b = p + (q - p) * min(i + 1, steps) / steps
        cv2.line(img, tuple(int(v) for v in a), tuple(int(v) for v in b), color, thick, cv2.LINE_AA)


def _nice_step(top: float) -> float:
    raw = top / 5
    power = 10 ** np.floor(np.log10(raw))
    return float(next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw))


def _panel(case: dict) -> np.ndarray:
    img = np.full((_H, _W, 3), 255, np.uint8)
    workers = _shardpack_workers(case) or [1]
    xs = list(range(1, max(workers) + 1))
    lines: list[tuple[str, list[tuple[float, float]], bool]] = []  # label, points, dashed
    points_only: list[tuple[str, tuple[float, float]]] = []
    for c in case["contenders"]:
        s = c["summary"]
        if not s.get("repeats"):
            continue
        if c["kind"] == "ceiling":
            lines.append(("ceiling", [(x, s["per_core_images_per_s"] * x) for x in xs], True))
        elif c["kind"] in ("baseline", "seed-2-scripts", "baseline-keep"):
            lines.append(
                (c["kind"], [(xs[0], s["images_per_s"]), (xs[-1], s["images_per_s"])], False)
            )
        elif c["kind"] == "naive-parallel":
            points_only.append(("naive-parallel", (c["workers"], s["images_per_s"])))
    shard = [(n, _get(case, f"shardpack@{n}")["images_per_s"]) for n in workers]
    lines.append(("shardpack", shard, False))
    values = [y for _, pts, _ in lines for _, y in pts] + [y for _, (_, y) in points_only]
    top, bottom = max(values), max(min(values), 1e-9)
    log = top / bottom > 30  # a keep run's ceiling is far above the rest: a log axis shows all
    if log:
        lo = 10 ** np.floor(np.log10(bottom))
        hi = 10 ** np.ceil(np.log10(top * 1.1))
        ticks = [
            m * 10**k
            for k in range(int(np.log10(lo)), int(np.log10(hi)) + 1)
            for m in (1, 2, 5)
            if lo <= m * 10**k <= hi
        ]
    else:
        step = _nice_step(top * 1.1)
        lo, hi = 0.0, step * np.ceil(top * 1.1 / step)
        ticks = [k * step for k in range(round(hi / step) + 1)]
    x0, x1, y0, y1 = _LEFT, _W - _RIGHT - _LEGEND, _H - _BOTTOM, _TOP
    span = max(xs[-1] - xs[0], 1)

    def at(x: float, y: float) -> tuple[int, int]:
        px = x0 + (x - xs[0]) / span * (x1 - x0) if len(xs) > 1 else (x0 + x1) / 2
        if log:
            share = (np.log10(max(y, lo)) - np.log10(lo)) / (np.log10(hi) - np.log10(lo))
        else:
            share = (y - lo) / (hi - lo)
        return int(px), int(y0 - share * (y0 - y1))

    for y in ticks:
        _, py = at(xs[0], y)
        cv2.line(img, (x0, py), (x1, py), (225, 225, 225), 1)
        _text(img, f"{y:,.0f}", (8, py + 4), 0.4)
    for x in xs:
        px, _ = at(x, 0)
        cv2.line(img, (px, y0), (px, y0 + 5), (60, 60, 60), 1)
        _text(img, str(x), (px - 4, y0 + 20), 0.45)
    cv2.line(img, (x0, y0), (x1, y0), (60, 60, 60), 1)
    cv2.line(img, (x0, y0), (x0, y1), (60, 60, 60), 1)
    _text(img, "workers (cores)", ((x0 + x1) // 2 - 55, _H - 14), 0.45)
    _text(img, "images/s" + (" (log)" if log else ""), (8, 36), 0.45)
    w = case["workload"]
    _text(
        img,
        f"{w['name']}  --encode {case['encode']}  ({w['num_images']:,} images)",
        (x0, 22),
        0.55,
        thick=1,
    )
    for label, pts, dashed in lines:
        color = _COLORS.get(label, (0, 0, 0))
        for a, b in itertools.pairwise(pts):
            (_dashed if dashed else cv2.line)(img, at(*a), at(*b), color, 2)
        if label == "shardpack":
            for p in pts:
                cv2.circle(img, at(*p), 5, color, -1, cv2.LINE_AA)
    for label, p in points_only:
        cv2.drawMarker(img, at(*p), _COLORS[label], cv2.MARKER_DIAMOND, 14, 2, cv2.LINE_AA)
    legend = [label for label, _, _ in lines] + [label for label, _ in points_only]
    for i, label in enumerate(dict.fromkeys(legend)):
        y, lx = y1 + 8 + 18 * i, x1 + 16
        cv2.line(img, (lx, y), (lx + 24, y), _COLORS.get(label, (0, 0, 0)), 2)
        _text(img, label, (lx + 30, y + 4), 0.4)
    return img


def plot(results: dict, path: str) -> None:
    """One panel per case: shardpack against workers, baseline and naive points, the ceiling."""

    def worth_a_panel(case: dict) -> bool:  # a lone shardpack point (memory check) is not
        kinds = {c["kind"] for c in case["contenders"]}
        return bool(_shardpack_workers(case)) and (
            kinds != {"shardpack"} or len(_shardpack_workers(case)) > 1
        )

    panels = [_panel(c) for c in results["cases"] if worth_a_panel(c)]
    if not panels:
        return
    cols = 2 if len(panels) > 1 else 1
    while len(panels) % cols:
        panels.append(np.full_like(panels[0], 255))
    rows = [np.hstack(panels[i : i + cols]) for i in range(0, len(panels), cols)]
    if not cv2.imwrite(path, np.vstack(rows)):
        raise OSError(f"{path}: OpenCV could not write the plot")
