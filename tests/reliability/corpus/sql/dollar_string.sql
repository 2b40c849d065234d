SELECT $$x$$ AS a FROM gpu
