"""Running the studio's work: the job queue (`queue`), the devices and GPUs a worker trains
on (`devices`, `gpus`), the training engines a run may name (`engines`) and `studio up`'s
supervisor of the web app and its workers (`launcher`)."""
