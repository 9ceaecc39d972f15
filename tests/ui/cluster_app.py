"""The dashboard the Ray and Slurm form tests drive: no Hub (its flavors fail to load, as
on a cluster with no token), a scripted source, the launch form's defaults given."""

from __future__ import annotations

from carl_tui.actions.action_error import ActionError
from carl_tui.ui.app import build_app
from carl_tui.ui.widgets.job_bar import JobBar
from tests.conftest import ScriptedSource, dashboard_config, plain_text


def no_hub():
    raise ActionError("no Hugging Face Hub in this test", kind="missing")


def make_app(spec, **kw):
    config = dashboard_config([ScriptedSource()], refresh_interval=0.05, launch_defaults=spec,
                              jobs_client_factory=no_hub, **kw)
    return build_app(config)


def job_bar(app) -> str:
    return plain_text(app.query_one(JobBar), 160)
