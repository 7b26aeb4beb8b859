"""Where the studio keeps its records: the database engine and migrations (`db`) and the
tables (`tables`), the same on SQLite and PostgreSQL."""
