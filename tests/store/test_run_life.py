"""A source's word on a run's life (`RunLife`) reaches the store: the last one said is kept."""

from carl_tui.events import RunLife, RunRef
from carl_tui.store import RunStore


def test_the_store_keeps_the_last_life_a_source_said():
    store = RunStore()
    run = RunRef("hf-job", "me", "job-1", "grpo")
    store.apply([RunLife(run, "queued")])
    assert store.runs() == [run]
    store.apply([RunLife(run, "failed", updated_at=1_700_000_000.0, reason="job ERROR")])
    life = store._state(run).life
    assert (life.state, life.updated_at, life.reason) == ("failed", 1_700_000_000.0, "job ERROR")


def test_a_new_life_alone_is_a_change_of_the_run():
    """A run on screen is drawn again when its version moves: a life said with no data
    (a job that ends, a recording's end) must move it, so its snapshot says the new life."""
    store = RunStore()
    run = RunRef("hf-job", "me", "job-1", "grpo")
    store.apply([RunLife(run, "live")])
    before = store.run_version(run.key)
    store.apply([RunLife(run, "finished")])
    assert store.run_version(run.key) > before
    assert store.snapshot(run.key).life.state == "finished"
    assert store.snapshot(run.key).version == store.run_version(run.key)
