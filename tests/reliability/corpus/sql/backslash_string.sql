SELECT 'a\' AS a FROM gpu
