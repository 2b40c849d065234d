SELECT * FROM gpu, LATERAL read_csv('/etc/passwd')
