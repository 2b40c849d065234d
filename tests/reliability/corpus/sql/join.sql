SELECT * FROM gpu JOIN read_json('/etc/passwd') ON true
