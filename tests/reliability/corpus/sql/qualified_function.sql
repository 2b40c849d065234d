SELECT pg_catalog.read_csv('/etc/passwd') FROM gpu
