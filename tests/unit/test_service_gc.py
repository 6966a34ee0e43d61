"""tune_gc: start-up objects frozen, young generation collected less often."""

import gc

from pluglog.service import GC_GEN0_THRESHOLD, tune_gc


def test_tune_gc_freezes_startup_objects_and_raises_gen0_threshold():
    before = gc.get_threshold()
    try:
        gc.unfreeze()
        kept = [{"startup": i} for i in range(100)]
        tune_gc()
        assert gc.get_freeze_count() >= len(kept)
        assert gc.get_threshold() == (GC_GEN0_THRESHOLD, before[1], before[2])
        # Cyclic garbage made after start is still collected.
        cycle = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
