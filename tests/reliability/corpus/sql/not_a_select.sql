COPY gpu TO '/tmp/out.csv'
