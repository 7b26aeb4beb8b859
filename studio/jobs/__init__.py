"""Running the studio's work: the job queue (`queue`), the life cycle every job goes through
(`lifecycle`), the devices and GPUs a worker trains on (`devices`, `gpus`), the training
engines a run may name (`engines`), `studio up`'s supervisor of the web app and its
workers (`launcher`) and the record of where it serves, which the CLI's commands find
(`locate`)."""
