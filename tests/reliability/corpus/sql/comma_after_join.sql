SELECT * FROM gpu JOIN cpu ON true, read_ipc('/tmp/x.arrow')
