SELECT * FROM secrets
