SELECT *, '--' AS pad, 1 AS start_ns, 2 AS end_ns FROM read_csv('/etc/passwd', has_header := false)
