SELECT * FROM READ_CSV ('/etc/passwd')
