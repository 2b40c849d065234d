SELECT system('id') FROM gpu
