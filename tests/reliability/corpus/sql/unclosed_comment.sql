SELECT * FROM gpu /* 
