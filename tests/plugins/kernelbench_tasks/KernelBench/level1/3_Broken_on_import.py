
raise RuntimeError("this task cannot be imported")
