"""Alembic revision scripts of the trajectory store, applied in order by `migrate(url)`."""
