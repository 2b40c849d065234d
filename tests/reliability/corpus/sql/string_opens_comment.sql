SELECT '/*' AS a, * FROM read_parquet('/tmp/x.parquet') -- */
