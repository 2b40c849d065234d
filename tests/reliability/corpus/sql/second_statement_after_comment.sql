SELECT * FROM gpu -- x
; DROP TABLE gpu
