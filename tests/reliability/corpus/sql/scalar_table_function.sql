SELECT read_csv('/etc/passwd') AS x FROM gpu
