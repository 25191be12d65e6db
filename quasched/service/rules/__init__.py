"""The rules the loop decides by: quota and borrowing, what can never fit, pending reasons, preemption victims, defragmentation moves, batch assignment."""
