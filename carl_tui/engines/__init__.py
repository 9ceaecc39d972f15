"""Where jobs run: one interface (`JobEngine`, in `base.py`) over every engine the
dashboard drives, so the screens and the guards never know which one they talk to.
Each engine lives in its own module here; the launch form turns a `LaunchSpec` into a
`Submission` (`actions/`), and an engine turns a `Submission` into a job."""
