"""The Environments Hub: stores, versions and serves environment packages.

The service is a FastAPI application (``hub.app:create_app``) backed by SQLAlchemy (SQLite by default,
PostgreSQL in production) and a file store (a local folder by default, S3-compatible object storage in
production). ``python -m hub serve`` / ``vf hub serve`` start it with zero set-up.
"""

__all__ = ["__version__"]

__version__ = "1.0.0"
