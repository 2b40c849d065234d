SELECT * FROM '/etc/passwd'
