SELECT name ‮ FROM gpu
