"""The PostgreSQL backend (pgvector + full-text search); psycopg is imported only here."""
