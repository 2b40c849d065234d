(SELECT * FROM gpu)
