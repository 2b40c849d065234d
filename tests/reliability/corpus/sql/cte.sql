WITH t AS (SELECT * FROM read_ndjson('/etc/passwd')) SELECT * FROM t
