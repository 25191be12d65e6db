"""Durable state: the SQLAlchemy store (SQLite or PostgreSQL, Alembic migrations) and the leader lease that fences it."""
