WITH read_csv AS (SELECT * FROM gpu) SELECT * FROM read_csv('/etc/passwd')
