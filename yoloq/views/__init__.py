"""Read-only views for people: the queue, a job's timeline and logs, the audit log."""
