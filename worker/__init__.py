"""Celery workers: the queue consumers, training engines, evaluation and export."""
