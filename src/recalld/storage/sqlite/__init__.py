"""The SQLite backend of the storage contract."""
