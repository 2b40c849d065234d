SELECT * FROM main.gpu
