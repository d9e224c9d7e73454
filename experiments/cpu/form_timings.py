"""When the decoder's CPU product forms are timed (`decoder._time_forms`, once per weight shape, row count and float16
copy or not): during warm-up, or inside the timed decode, where each first use stalls the step that meets it.
Runs the default job (or the one the overrides give) with `_time_forms` and `run._decode` wrapped.

    OMP_NUM_THREADS=2 python experiments/cpu/form_timings.py [OUTPUT_DIR [OVERRIDE ...]]
"""

from __future__ import annotations

import sys
import time

from hydra import compose, initialize_config_dir

import specbench.models.decoder as dec
import specbench.run as run_mod

PHASE = ["setup"]
TIMED: list[tuple[str, tuple, float]] = []


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/form_timings"
    real_time, real_decode = dec._time_forms, run_mod._decode

    def time_forms(weight, row_counts, half):
        start = time.perf_counter()
        real_time(weight, row_counts, half)
        for rows in row_counts:
            key = dec._form_key(weight, rows, half)
            TIMED.append((PHASE[0], key + dec._CPU_FORMS[key], (time.perf_counter() - start) / len(row_counts)))

    def decode(engine, prompts, batch_size, desc, *args, **kwargs):
        PHASE[0] = f"timed decode ({desc})"
        try:
            return real_decode(engine, prompts, batch_size, desc, *args, **kwargs)
        finally:
            PHASE[0] = "between"

    dec._time_forms, run_mod._decode = time_forms, decode
    with initialize_config_dir(config_dir=str(run_mod.CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["logger=none", f"output_dir={out}", *sys.argv[2:]])
    run_mod.run(cfg)
    phases: dict[str, list[float]] = {}
    for phase, key, seconds in TIMED:
        phases.setdefault(phase, []).append(seconds)
        print(f"{phase:28s} N={key[0]:6d} K={key[1]:5d} rows={key[3]} half={key[4]!s:5s} -> {key[5]:10s} "
              f"on {key[6]} rows  {seconds * 1e3:7.1f} ms")
    for phase, times in phases.items():
        print(f"{phase}: {len(times)} timings, {sum(times):.2f} s")


if __name__ == "__main__":
    main()
