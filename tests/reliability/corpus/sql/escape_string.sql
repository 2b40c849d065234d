SELECT E'\'' AS a, * FROM read_csv('/etc/passwd') --'
