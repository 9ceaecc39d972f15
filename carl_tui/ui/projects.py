"""`P`: choose a Trackio project and open it (the app's part: its services, store and
follower; the picker itself is `screens/pickers.ProjectPicker`)."""

from __future__ import annotations

from typing import Any


def pick_project(app: Any) -> None:
    """`P` on `app` (the `CarlApp`): list the source's projects (in a worker), then
    choose one: one already open is switched to, another is opened as a new source and
    followed."""
    # lazy: the picker's widgets load only when it opens
    from carl_tui.ui.screens.pickers import ProjectPicker

    services = app.services
    if services.list_projects is None or services.open_project is None:
        app.notify("this source has no projects to choose from", severity="warning")
        return

    def opened(name: str | None) -> None:
        if not name:
            return
        runs = [r for r in app.store.runs() if r.project == name]
        if runs:  # already open: just show it
            app.switch_run(runs[0].key)
            return
        app.follower.add_source(services.open_project(name))  # type: ignore[misc]
        app.follower.follow_project(name)
        app.notify(f"opening project {name}", timeout=3)

    def show(names: list[str]) -> None:
        if not names:
            app.notify("no projects found", severity="warning")
            return
        current = app.snapshot.run.project if app.snapshot else None
        app.push_screen(ProjectPicker([(n, n) for n in names], current), opened)

    def load() -> None:
        app.call_from_thread(show, services.list_projects())  # type: ignore[misc]

    app.run_worker(load, thread=True, exclusive=True, group="projects",
                   exit_on_error=False, description="listing projects")
