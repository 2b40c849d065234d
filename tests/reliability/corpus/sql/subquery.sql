SELECT * FROM gpu WHERE name IN (SELECT column_1 FROM read_csv('/etc/passwd'))
